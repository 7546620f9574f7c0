#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// The job's rendezvous as one value kept in etcd (/trainrun/<run_id>/state) and changed only by
// compare-and-set: the same rounds as RoundMachine, but every agent may apply a change, so no
// node is special. Times are Unix seconds (the agents' clocks are compared with each other only
// for timeouts of seconds). docs/protocol.md describes the layout.
//
// A run id may hold one job after another: each has a generation, and a job that has ended is
// over for good; an agent that first finds it so belongs to the next generation, which its join
// starts afresh (compare-and-set: of agents arriving together, one starts it, the others join).
struct EtcdMember {
  std::string id;  // the node's key under /trainrun/<run_id>/nodes/, held by its lease
  NodeDescriptor node;
  double joined_at = 0;
};

// The most bytes of failures one value in etcd holds (the state's, a node's `ended` key's): far
// under etcd's default request limit (1.5 MiB) with the members beside them.
inline constexpr std::size_t kMaxStoredFailureBytes = 256 * 1024;

struct EtcdRoundState {
  // concluding: a failure ends the job; every member not done says what failed (its key under
  // ended/) before the stop that names the job's root cause, as RoundMachine's phase.
  enum class Phase { forming, running, concluding, ended };
  std::uint64_t generation = 0;  // which job of the run id this is
  Phase phase = Phase::forming;
  std::uint64_t round = 0;
  int restart_count = 0;
  std::vector<EtcdMember> waiting;       // joined, in join order, not in the running round
  std::vector<EtcdMember> participants;  // the running round's members
  std::set<std::string> done;
  std::set<std::string> expected;  // forming after a restart: the survivors
  std::optional<double> forming_since;
  std::optional<double> min_reached_at;
  std::optional<Restart> restart;  // why the current round began, when a round ended before it
  std::optional<Stop> stop;        // the job's end
  // Running, and every participant has answered (its key under answers/ names this round):
  // only then do the workers start.
  bool started = false;
  // Concluding: the members yet to say what failed, the failures reported so far (the failing
  // node's, kept here so that they count if it is lost), since when, and why no restart.
  std::set<std::string> awaiting;
  std::map<std::string, Ended> reports;
  std::optional<double> concluding_since;
  std::string concluding_why;

  const EtcdMember* participant(const std::string& id) const;
  const EtcdMember* waiter(const std::string& id) const;
};

std::string encode_state(const EtcdRoundState& state);
// Throws ProtocolError for a value that is not a state this version wrote.
EtcdRoundState decode_state(const std::string& text);

// The changes, each returning whether the state changed. `now`: Unix seconds.
class EtcdRound {
 public:
  EtcdRound(RoundOptions options, std::string endpoint, double heartbeat_timeout_s)
      : options_(std::move(options)),
        endpoint_(std::move(endpoint)),
        heartbeat_timeout_s_(heartbeat_timeout_s) {}

  // The generation an agent belongs to, from the state it first reads: the stored job while it
  // forms or runs, the next one once it has ended (0 when nothing is stored).
  std::uint64_t generation_to_join(const std::optional<EtcdRoundState>& stored) const;
  // The state that changes of generation `g` apply to: the stored one; a fresh one where nothing
  // is stored or the stored job is an earlier (so ended) one; nothing where a later job has begun,
  // so `g` is over.
  std::optional<EtcdRoundState> state_of(const std::optional<EtcdRoundState>& stored,
                                         std::uint64_t g) const;

  bool join(EtcdRoundState& s, const std::string& id, const NodeDescriptor& node, double now) const;
  // The round starts once every participant has answered it. `answers`: node id to the round
  // that node's answer key names.
  bool start(EtcdRoundState& s, const std::map<std::string, std::uint64_t>& answers) const;
  bool failure(EtcdRoundState& s, const std::string& id, const Failure& report, double now) const;
  bool done(EtcdRoundState& s, const std::string& id, std::uint64_t round) const;
  // Concluding: the job ends once every awaited member has said what failed (`ended`: node id
  // to its report, as its key under ended/ holds it), or at the deadline (join_timeout after the
  // failure); the one rule names the root cause (concluded_stop).
  bool conclude(EtcdRoundState& s, const std::map<std::string, Ended>& ended, double now) const;
  // Whether every awaited member has said, `answered`: node id to the round its report names.
  static bool all_answered(const EtcdRoundState& s,
                           const std::map<std::string, std::uint64_t>& answered);
  // A member lost before the round started never ran: the round forms again without it, with no
  // restart counted. After that, as the built-in rendezvous: restart or end the job.
  bool lost(EtcdRoundState& s, const std::string& id, const std::string& why, double now) const;
  // Members whose node key is gone (lease expired or revoked) are lost.
  bool prune(EtcdRoundState& s, const std::set<std::string>& live, double now) const;
  // Last call, join timeouts; newcomers waiting on a full job too long are dropped.
  bool tick(EtcdRoundState& s, double now) const;
  // When tick() may next change something.
  std::optional<double> next_deadline(const EtcdRoundState& s) const;
  // A Stop for a node no longer in the state (dropped while waiting on a full job, or lost).
  Stop dropped(const EtcdRoundState& s) const;
  // A Stop for an agent whose job was replaced by a later one before it saw the end.
  Stop superseded() const;

 private:
  void maybe_complete(EtcdRoundState& s, double now) const;
  void begin_forming(EtcdRoundState& s, double now, Restart restart) const;
  void form_again(EtcdRoundState& s, double now, Restart why) const;
  void next_round(EtcdRoundState& s, double now, Restart restart) const;
  void end_job(EtcdRoundState& s, Stop stop) const;

  RoundOptions options_;
  std::string endpoint_;
  double heartbeat_timeout_s_;
};

}  // namespace trainrun::rendezvous
