#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "round_rules.hpp"
#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

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

// The built-in rendezvous' side of the job's rounds: connected agents, their heartbeats and the
// status they are sent, around the rules every backend shares (RoundRules, round_rules.hpp),
// which decide the rounds, restarts, failures and the job's end. Driven by events with the
// current time passed in, it returns what to send; it owns no sockets and reads no clock, so the
// TCP server drives it and tests drive it with a fake clock. After each call the host should call
// tick() at next_deadline().
class RoundMachine {
 public:
  // concluding: a failure ends the job; the machine waits for every node of the round to say
  // what failed (`ended`) before the `stop` that names the job's root cause.
  using Phase = RoundState::Phase;

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

  Phase phase() const { return state_.phase; }
  std::uint64_t round() const { return state_.round; }
  int restart_count() const { return state_.restart_count; }
  std::size_t waiting_count() const { return state_.waiting.size(); }
  // "host (pid N)" of a node that joined, else "connection #id": for messages.
  std::string describe(NodeId id) const;

 private:
  struct Session {
    Clock::time_point last_heard;
  };

  void on_join(Effects& fx, NodeId id, const NodeDescriptor& node, Clock::time_point now);
  void on_lost(Effects& fx, NodeId id, const std::string& why, Clock::time_point now);
  // Carries out what the rules decided: the messages, and the sessions that end with the job.
  void apply(Effects& fx, const RoundDecision& d, Clock::time_point now);
  void drop(Effects& fx, NodeId id, const Reject& reject, bool peer_lost = false);
  Waiting waiting_status(Clock::time_point now, std::size_t joined) const;
  bool joined(NodeId id) const;

  RoundRules rules_;
  LivenessOptions liveness_;
  std::string endpoint_;
  RoundState state_;  // members by their NodeId in decimal
  std::map<NodeId, Session> sessions_;
  Clock::time_point next_status_;
  // At most the earliest last_heard of the sessions (exact after tick()); empty: no sessions seen.
  std::optional<Clock::time_point> heard_floor_;
};

}  // namespace trainrun::rendezvous
