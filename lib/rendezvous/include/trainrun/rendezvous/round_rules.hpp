#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"
#include "trainrun/rendezvous/round_forming.hpp"
#include "trainrun/rendezvous/round_state.hpp"

namespace trainrun::rendezvous {

// The rules of the job's rounds, whichever backend keeps them: who joins and when a round forms
// (RoundForming), and how a running round ends: worker failures and restarts, lost nodes, the
// exit barrier, the conclusion of a failed job, timeouts. Pure: a state and the time in, the
// changed state and a decision out.
class RoundRules {
 public:
  // `endpoint`: where the agents meet ("host:port"), for messages.
  RoundRules(RoundOptions options, std::string endpoint)
      : forming_(std::move(options), std::move(endpoint)) {}

  // Why a join of `id` would be refused (node rank, master port, a member of the running round
  // joining again), or nothing.
  std::optional<Reject> refusal(const RoundState& s, const std::string& id,
                                const NodeDescriptor& node) const {
    return forming_.refusal(s, id, node);
  }
  // A waiting member that joins again keeps its place: its descriptor is refreshed.
  RoundDecision join(RoundState& s, const std::string& id, const NodeDescriptor& node,
                     RoundTime now) const {
    return forming_.join(s, id, node, now);
  }
  // The members of a formed round have taken their places: its workers may start.
  RoundDecision start(RoundState& s) const { return forming_.start(s); }
  RoundDecision failure(RoundState& s, const std::string& id, const Failure& report,
                        RoundTime now) const;
  RoundDecision done(RoundState& s, const std::string& id, std::uint64_t round) const;
  // Concluding: what failed on `id`, after its halt.
  RoundDecision ended(RoundState& s, const std::string& id, const Ended& report) const;
  // A member is gone (its connection or its lease). Before its round started it never ran: the
  // round forms again without it, no restart counted. After, a restart or the end of the job.
  RoundDecision lost(RoundState& s, const std::string& id, const std::string& why,
                     RoundTime now) const;
  // A member's preflight failed in its round: the job ends on every node with its line, whatever
  // restarts are left (a configuration error; a restart would meet it again).
  RoundDecision abort(RoundState& s, const std::string& id, const Abort& report) const;
  // Last call, join timeouts, the end of concluding.
  RoundDecision tick(RoundState& s, RoundTime now) const;
  // The job ends with `stop` (the built-in: its host left).
  RoundDecision end(RoundState& s, Stop stop) const;

  // When tick() may next change something.
  std::optional<RoundTime> next_deadline(const RoundState& s) const;
  // The running round's assignments, index-aligned with s.participants.
  std::vector<Assignment> assignments(const RoundState& s) const { return forming_.assignments(s); }
  // What a halted member is told, and what a newcomer dropped from a full job is.
  Halt halt(const RoundState& s) const;
  Stop full_job_stop() const { return forming_.full_job_stop(); }
  // How many must join before a round may form: MAX with static ranks, else MIN.
  int count_requirement() const { return forming_.count_requirement(); }
  const RoundOptions& options() const { return forming_.options(); }

 private:
  void begin_concluding(RoundState& s, RoundTime now, std::string why, RoundDecision& d) const;
  void maybe_conclude(RoundState& s, RoundDecision& d) const;

  RoundForming forming_;
};

}  // namespace trainrun::rendezvous
