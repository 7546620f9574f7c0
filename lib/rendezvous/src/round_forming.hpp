#pragma once

#include <optional>
#include <string>
#include <vector>

#include "round_state.hpp"
#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// How the job's rounds form, part of the round rules (RoundRules): who may join, when a round
// forms (MIN and MAX nodes, the last call, the survivors after a restart), a late join scaling
// up, a new round after a restart, and the timeouts of joining. Pure, as RoundRules.
class RoundForming {
 public:
  // `endpoint`: where the agents meet ("host:port"), for messages.
  RoundForming(RoundOptions options, std::string endpoint)
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
  // Forming: the round forms once enough have joined and the last call is over.
  void complete_if_ready(RoundState& s, RoundTime now, RoundDecision& d) const;
  // The running round ends for `restart`: its members must join the next round afresh; the
  // nodes waiting stay in line.
  void restart(RoundState& s, RoundTime now, Restart why, RoundDecision& d) const;
  // A round that never started forms again: its members go back to the head of the line.
  void form_again(RoundState& s, RoundTime now, Restart why, RoundDecision& d) const;
  // Forming: the last call, and the end of the job when a round does not form in time.
  void tick_forming(RoundState& s, RoundTime now, RoundDecision& d) const;
  // Newcomers waiting on a job that is full give up after the join timeout.
  void drop_stale_newcomers(RoundState& s, RoundTime now, RoundDecision& d) const;
  // When tick_forming() or drop_stale_newcomers() may next change something.
  std::optional<RoundTime> next_deadline(const RoundState& s) const;

  // The running round's assignments, index-aligned with s.participants.
  std::vector<Assignment> assignments(const RoundState& s) const;
  // What a newcomer dropped from a full job is told.
  Stop full_job_stop() const;
  // How many must join before a round may form: MAX with static ranks, else MIN.
  int count_requirement() const {
    return options_.static_ranks ? options_.max_nodes : options_.min_nodes;
  }
  const RoundOptions& options() const { return options_; }

 private:
  void complete(RoundState& s, std::size_t count, RoundDecision& d) const;
  void next_round(RoundState& s, RoundTime now, Restart restart, RoundDecision& d) const;

  RoundOptions options_;
  std::string endpoint_;
};

}  // namespace trainrun::rendezvous
