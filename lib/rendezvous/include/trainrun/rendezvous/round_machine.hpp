#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"
#include "trainrun/rendezvous/rank_assignment.hpp"

namespace trainrun::rendezvous {

using NodeId = std::uint64_t;

// What the machine asks its host to do: send `message` to `to`, then close that connection
// if `close` (the machine has already forgotten the node). `peer_lost`: the node was declared
// lost while its connection is still open (silent past the heartbeat timeout: dead, stopped or
// cut off), so the host must not wait for it to acknowledge the close.
struct Outgoing {
  NodeId to = 0;
  ServerMessage message;
  bool close = false;
  bool peer_lost = false;
};

struct Effects {
  std::vector<Outgoing> messages;
  std::vector<std::string> log;  // one line per notable event, for the hosting agent's log
  // Connections dropped before they joined (idle past the heartbeat timeout): a flood of them is
  // the host's to rate-limit, as its refusals. Each is (kind, line).
  std::vector<std::pair<std::string, std::string>> refusals;
};

// The job's rendezvous as a pure state machine: connected agents, the round being formed or
// run, restarts, failure and completion. Driven by events with the current time passed in, it
// returns what to send; it owns no sockets and reads no clock, so any transport (the built-in TCP
// server, or a store such as etcd that serialises events) can drive it and tests can drive it
// with a fake clock. After each call the host should call tick() at next_deadline().
class RoundMachine {
 public:
  // concluding: a failure ends the job; the machine waits for every node of the round to say
  // what failed (`ended`) before the `stop` that names the job's root cause.
  enum class Phase { forming, running, concluding, ended };

  // `endpoint`: where agents meet ("host:port"), for messages.
  RoundMachine(RoundOptions options, LivenessOptions liveness, std::string endpoint,
               Clock::time_point now);

  // A connection finished its handshake and may now join.
  Effects connected(NodeId id, Clock::time_point now);
  // A message from a connected node (handshake messages are a protocol violation here).
  // For Join, an empty descriptor addr must already be replaced by the address the server saw.
  Effects received(NodeId id, const ClientMessage& message, Clock::time_point now);
  // The connection closed (or was closed by the server for a protocol violation).
  Effects disconnected(NodeId id, const std::string& why, Clock::time_point now);
  // Time passed: heartbeats, last call, join timeouts, status messages.
  Effects tick(Clock::time_point now);
  // The agent hosting this machine is going away (`why`: what stopped it): without the server no
  // node can go on, so the job ends for every other node, whatever restarts are left, with a
  // stop naming the host. `host`: that agent's own connection, when it has been admitted.
  Effects host_left(std::optional<NodeId> host, const std::string& why, Clock::time_point now);

  std::optional<Clock::time_point> next_deadline() const;

  Phase phase() const { return phase_; }
  std::uint64_t round() const { return round_; }
  int restart_count() const { return restart_count_; }
  std::size_t waiting_count() const { return waiting_.size(); }

 private:
  struct Session {
    Clock::time_point last_heard;
    std::optional<NodeDescriptor> node;  // set once joined
    Clock::time_point joined_at;
  };

  void on_join(Effects& fx, NodeId id, const NodeDescriptor& node, Clock::time_point now);
  void on_failure(Effects& fx, NodeId id, const Failure& report, Clock::time_point now);
  void on_done(Effects& fx, NodeId id, const Done& done);
  void on_ended(Effects& fx, NodeId id, const Ended& ended);
  void begin_concluding(Effects& fx, Clock::time_point now, const std::string& why);
  void maybe_conclude(Effects& fx);
  void on_lost(Effects& fx, NodeId id, const std::string& why, Clock::time_point now);
  void maybe_complete(Effects& fx, Clock::time_point now);
  void complete_round(Effects& fx, std::vector<NodeId> members);
  void begin_forming(Effects& fx, Clock::time_point now, std::set<NodeId> expected,
                     const Restart& restart);
  void end_job(Effects& fx, Stop stop);
  void drop(Effects& fx, NodeId id, const std::string& reason, bool peer_lost = false);
  Waiting waiting_status(Clock::time_point now) const;
  std::string describe(NodeId id) const;
  int count_requirement() const {
    return options_.static_ranks ? options_.max_nodes : options_.min_nodes;
  }

  RoundOptions options_;
  LivenessOptions liveness_;
  std::string endpoint_;
  Phase phase_ = Phase::forming;
  std::uint64_t round_ = 0;
  int restart_count_ = 0;
  std::map<NodeId, Session> sessions_;
  std::vector<NodeId> waiting_;       // joined, in join order, not in the running round
  std::vector<NodeId> participants_;  // the running round's members
  std::set<NodeId> done_;
  std::set<NodeId> expected_;  // forming after a restart: survivors we wait for before last call
  std::optional<Clock::time_point> forming_since_;  // first join of the forming round
  std::optional<Clock::time_point> min_reached_at_;
  Clock::time_point next_status_;
  // At most the earliest last_heard of the sessions (exact after tick()); empty: no sessions seen.
  std::optional<Clock::time_point> heard_floor_;
  std::optional<Stop> final_stop_;
  // Concluding: each node's failures as it last reported them, the nodes yet to send `ended`,
  // and why the job ends (the root cause is named when they have all said).
  std::map<NodeId, Ended> failures_;
  std::set<NodeId> awaiting_;
  std::string concluding_why_;
  Clock::time_point concluding_since_;
};

}  // namespace trainrun::rendezvous
