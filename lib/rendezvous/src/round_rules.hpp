#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "round_forming.hpp"
#include "round_state.hpp"
#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// The rules of the job's rounds, whichever backend keeps them: who joins and when a round forms
// is forming()'s (RoundForming, asked directly); how a running round ends is this class's: worker
// failures and restarts, lost nodes, the exit barrier, the conclusion of a failed job, timeouts
// (which form a new round through forming()). Pure: a state and the time in, the changed state
// and a decision out.
class RoundRules {
 public:
  // `endpoint`: where the agents meet ("host:port"), for messages.
  RoundRules(RoundOptions options, std::string endpoint)
      : forming_(std::move(options), std::move(endpoint)) {}

  // Joins, refusals, the start of a formed round, assignments, the job's options.
  const RoundForming& forming() const { return forming_; }

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
  // What a halted member is told.
  Halt halt(const RoundState& s) const;

 private:
  void begin_concluding(RoundState& s, RoundTime now, std::string why, RoundDecision& d) const;
  void maybe_conclude(RoundState& s, RoundDecision& d) const;

  RoundForming forming_;
};

}  // namespace trainrun::rendezvous
