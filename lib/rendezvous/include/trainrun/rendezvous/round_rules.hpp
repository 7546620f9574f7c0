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

namespace trainrun::rendezvous {

// A time for the round rules: the time since an epoch each backend chooses (the built-in: its
// steady clock's; etcd: the Unix epoch, so that every agent reads the same), in whole
// nanoseconds, so that a deadline compares exactly as it was set.
using RoundTime = std::chrono::nanoseconds;

// A node that joined, under the id its backend gives it (the built-in: its connection; etcd: its
// node key).
struct RoundMember {
  std::string id;
  NodeDescriptor node;
  RoundTime joined_at{};
};

// The job's rounds as a plain value: the built-in rendezvous holds one in memory, the etcd
// backend one in etcd. Only RoundRules changes it.
struct RoundState {
  // concluding: a failure ends the job; every member not done says what failed before the stop
  // that names the job's root cause.
  enum class Phase { forming, running, concluding, ended };
  Phase phase = Phase::forming;
  std::uint64_t round = 0;
  int restart_count = 0;
  std::vector<RoundMember> waiting;       // joined, in join order, not in the running round
  std::vector<RoundMember> participants;  // the running round's members
  // Running, and its members have taken their places (etcd: answered); only then do workers
  // start. The built-in starts a round as it forms.
  bool started = false;
  std::set<std::string> done;
  std::set<std::string> expected;  // forming after a restart: the survivors
  std::optional<RoundTime> forming_since;
  std::optional<RoundTime> min_reached_at;
  std::optional<Restart> restart;  // why the current round began, when a round ended before it
  std::optional<Stop> stop;        // the job's end
  // Concluding: the members yet to say what failed, what each said (the failing node's report
  // first), since when, and why no restart.
  std::set<std::string> awaiting;
  std::map<std::string, Ended> reports;
  std::optional<RoundTime> concluding_since;
  std::string concluding_why;

  const RoundMember* participant(const std::string& id) const;
  const RoundMember* waiter(const std::string& id) const;
};

// What one change decided, beside the new state: what the backend carries out (the built-in
// sends it to the nodes; etcd writes the state, which every agent reads). One change may decide
// several things: a lost node ends a round, and the next forms at once.
struct RoundDecision {
  bool changed = false;
  std::optional<Reject> refused;       // the join is refused, why; the state is unchanged
  std::vector<std::string> restarted;  // the ended round's members, told state.restart
  // A round formed: state.participants, each with its assignment (index-aligned).
  std::vector<Assignment> formed;
  std::vector<std::string> halted;   // concluding began: these stop and say what failed
  bool ended = false;                // the job ended: state.stop for every node
  std::vector<std::string> dropped;  // newcomers that waited on a full job too long
  std::vector<std::string> log;      // one line per notable event
};

// The rules of the job's rounds, whichever backend keeps them: who joins, when a round forms
// (MIN and MAX nodes, the last call, the survivors after a restart), a late join scaling up,
// lost nodes, worker failures and restarts, the conclusion of a failed job, the exit barrier,
// timeouts. Pure: a state and the time in, the changed state and a decision out.
class RoundRules {
 public:
  // `endpoint`: where the agents meet ("host:port"), for messages.
  RoundRules(RoundOptions options, std::string endpoint)
      : options_(std::move(options)), endpoint_(std::move(endpoint)) {}

  // Why a join of `id` would be refused (node rank, master port, a member of the running round
  // joining again), or nothing.
  std::optional<Reject> refusal(const RoundState& s, const std::string& id,
                                const NodeDescriptor& node) const;
  // A waiting member that joins again keeps its place: its descriptor is refreshed.
  RoundDecision join(RoundState& s, const std::string& id, const NodeDescriptor& node,
                     RoundTime now) const;
  // The members of a formed round have taken their places: its workers may start.
  RoundDecision start(RoundState& s) const;
  RoundDecision failure(RoundState& s, const std::string& id, const Failure& report,
                        RoundTime now) const;
  RoundDecision done(RoundState& s, const std::string& id, std::uint64_t round) const;
  // Concluding: what failed on `id`, after its halt.
  RoundDecision ended(RoundState& s, const std::string& id, const Ended& report) const;
  // A member is gone (its connection or its lease). Before its round started it never ran: the
  // round forms again without it, no restart counted. After, a restart or the end of the job.
  RoundDecision lost(RoundState& s, const std::string& id, const std::string& why,
                     RoundTime now) const;
  // Last call, join timeouts, the end of concluding.
  RoundDecision tick(RoundState& s, RoundTime now) const;
  // The job ends with `stop` (the built-in: its host left).
  RoundDecision end(RoundState& s, Stop stop) const;

  // When tick() may next change something.
  std::optional<RoundTime> next_deadline(const RoundState& s) const;
  // The running round's assignments, index-aligned with s.participants.
  std::vector<Assignment> assignments(const RoundState& s) const;
  // What a halted member is told, and what a newcomer dropped from a full job is.
  Halt halt(const RoundState& s) const;
  Stop full_job_stop() const;
  // How many must join before a round may form: MAX with static ranks, else MIN.
  int count_requirement() const {
    return options_.static_ranks ? options_.max_nodes : options_.min_nodes;
  }
  const RoundOptions& options() const { return options_; }

 private:
  void maybe_complete(RoundState& s, RoundTime now, RoundDecision& d) const;
  void complete(RoundState& s, std::size_t count, RoundDecision& d) const;
  void begin_forming(RoundState& s, RoundTime now, Restart restart, RoundDecision& d) const;
  void form_again(RoundState& s, RoundTime now, Restart why, RoundDecision& d) const;
  void next_round(RoundState& s, RoundTime now, Restart restart, RoundDecision& d) const;
  void begin_concluding(RoundState& s, RoundTime now, std::string why, RoundDecision& d) const;
  void maybe_conclude(RoundState& s, RoundDecision& d) const;
  void end_job(RoundState& s, Stop stop, RoundDecision& d) const;

  RoundOptions options_;
  std::string endpoint_;
};

// "host (addr, pid N)", as messages name a node.
std::string describe(const RoundMember& m);

}  // namespace trainrun::rendezvous
