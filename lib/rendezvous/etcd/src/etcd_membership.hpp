#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "etcd_round.hpp"
#include "etcd_watch.hpp"
#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// This node in its job on etcd, from the states and summaries its agent sees: its joins, the
// events the agent gets (assignment, restart, halt, stop, the waiting lines) and its answer when
// a round forms with it. No I/O: what it writes or reads goes through Hooks, what it knows of
// etcd is `view`.
class EtcdMembership {
 public:
  struct Hooks {
    std::function<bool()> finished;  // the job has ended on this node
    std::function<void(Stop)> fail;
    // This node takes its place in `round`: a key of its own, naming the round.
    std::function<void(std::uint64_t round)> answer;
    // The state alone, at `revision` or later (a summary does not say all this node needs).
    std::function<void(std::int64_t revision)> read_state;
    // When the state may next change by the clock alone.
    std::function<void(const std::optional<double>& at)> deadline;
    std::function<void(const std::string&)> log;
  };

  EtcdMembership(const EtcdRound& round, const RoundOptions& options, const EtcdView& view,
                 std::string node_id, std::string endpoint, const ClientEvents& events, Hooks hooks)
      : round_(round),
        options_(options),
        view_(view),
        node_id_(std::move(node_id)),
        endpoint_(std::move(endpoint)),
        events_(events),
        hooks_(std::move(hooks)) {}

  // The agent joins (again, after a restart): the join waits to be written.
  void join(const NodeDescriptor& node);
  // The join not written yet, and which of this agent's joins it is.
  const std::optional<NodeDescriptor>& pending_join() const { return pending_join_; }
  std::uint64_t join_seq() const { return join_seq_; }
  // The pending join, now written.
  std::optional<NodeDescriptor> take_join() { return std::exchange(pending_join_, std::nullopt); }

  // The round this node's workers run, once assigned.
  const std::optional<std::uint64_t>& assigned() const { return assigned_; }
  // Its done (ended) key names the round assigned.
  void done() { done_round_ = assigned_; }
  void ended() { ended_round_ = assigned_; }

  // No state of this node's job yet: what it knows is the job's first state, so that the
  // summary of the write that takes the first joins is not news to it.
  void first_state();
  // A state at `revision`, read, watched or written by this agent.
  void react(const EtcdRoundState& s, std::int64_t revision);
  // The summary key watched at `revision`.
  void take_summary(const std::string& value, std::int64_t revision);

  // Whether the state does not yet show what this agent's own keys say.
  bool own_keys_pending() const;
  // The revision of the last state or summary taken in.
  std::int64_t seen_revision() const { return seen_revision_; }

 private:
  bool take_round(const EtcdRoundSummary& m);
  bool join_taken(const EtcdRoundState& s) const;
  void assign(const EtcdRoundState& s);
  void report_waiting(std::size_t waiting);

  const EtcdRound& round_;
  const RoundOptions& options_;
  const EtcdView& view_;
  std::string node_id_;
  std::string endpoint_;
  const ClientEvents& events_;
  Hooks hooks_;
  bool joined_ = false;
  bool preflight_ = false;  // its join carries a preflight offer
  std::optional<NodeDescriptor> pending_join_;
  std::uint64_t join_seq_ = 0;  // this agent's joins so far
  std::optional<std::uint64_t> assigned_;
  std::optional<std::uint64_t> answering_;    // the round this node answered, not started yet
  std::optional<std::uint64_t> halted_;       // the round whose halt this node was given
  std::optional<std::uint64_t> done_round_;   // the round this node's done key names
  std::optional<std::uint64_t> ended_round_;  // the round its ended key names
  std::optional<EtcdRoundSummary> known_;     // the summary of what this node last took in
  std::int64_t seen_revision_ = 0;
  int last_waiting_count_ = -1;
  Clock::time_point last_waiting_log_{};
};

}  // namespace trainrun::rendezvous
