#include "etcd_membership.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "client_stops.hpp"
#include "etcd_client.hpp"

namespace trainrun::rendezvous {

using Phase = EtcdRoundState::Phase;

void EtcdMembership::join(const NodeDescriptor& node) {
  joined_ = true;
  ++join_seq_;
  preflight_ = node.preflight.has_value();
  pending_join_ = node;
}

void EtcdMembership::first_state() {
  known_ = round_.summary(std::nullopt, *round_.state_of(std::nullopt, *view_.generation));
}

void EtcdMembership::react(const EtcdRoundState& s, std::int64_t revision) {
  // An earlier job, over: this node's job begins with its join.
  if (hooks_.finished() || revision <= seen_revision_ || s.generation < *view_.generation) return;
  seen_revision_ = revision;
  known_ = round_.summary(std::nullopt, s);
  if (s.generation > *view_.generation) return hooks_.fail(round_.superseded());
  if (s.stop) return hooks_.fail(*s.stop);
  const EtcdMember* me = s.participant(node_id_);
  if (s.phase == Phase::concluding && assigned_ && *assigned_ == s.round) {
    if (!me) return hooks_.fail(round_.dropped(s));
    if (s.awaiting.count(node_id_) && halted_ != s.round) {
      halted_ = s.round;
      if (events_.on_halt) events_.on_halt(round_.halt(s));
      if (hooks_.finished()) return;
    }
  }
  if (answering_ && *answering_ != s.round && !assigned_) {
    // The round this node answered never started (a member never answered, or one came).
    answering_.reset();
    if (s.restart) hooks_.log(s.restart->reason);
  }
  if (assigned_ && (s.round != *assigned_ || !me)) {
    assigned_.reset();
    joined_ = false;
    Restart r = s.restart.value_or(
        Restart{RestartCause::node_lost, "the round ended", s.restart_count, std::nullopt});
    if (events_.on_restart) events_.on_restart(r);
    if (hooks_.finished()) return;
  }
  if (joined_ && !assigned_ && join_taken(s)) {
    if (auto r = s.refused.find(node_id_); r != s.refused.end()) {
      return hooks_.fail(ClientStops{endpoint_}.dropped(r->second));
    }
    if (!me && !s.waiter(node_id_)) return hooks_.fail(round_.dropped(s));
  }
  if (joined_ && !assigned_ && me && s.phase == Phase::running) {
    if (s.started) {
      assign(s);
    } else if (!answering_) {
      answering_ = s.round;
      hooks_.answer(s.round);
    }
  } else if (joined_ && !assigned_ && s.waiter(node_id_)) {
    report_waiting(s.waiting.size());
  }
  hooks_.deadline(round_.next_deadline(s));
}

// A summary of a change: the state is read only where the change concerns this node (it decides
// nothing for the others: a join taken, a deadline moved), and where a round formed or started
// with this node in it does not say all this node needs.
void EtcdMembership::take_summary(const std::string& value, std::int64_t revision) {
  // Read since.
  if (revision <= view_.stored_mod_revision || revision <= seen_revision_) return;
  const std::optional<EtcdRoundSummary> m = decode_summary(base64_decode(value));
  if (!m) return hooks_.read_state(revision);
  if (!take_round(*m) && concerns(*m, known_, node_id_)) return hooks_.read_state(revision);
  if (hooks_.finished()) return;
  // The state changes: the agent that writes it is at work.
  seen_revision_ = revision;
  known_ = *m;
  hooks_.deadline(m->deadline);
  // Only a waiter's count holds its own join: one not yet taken would say "0 of 2 joined" of a
  // node that has joined.
  const auto& stored = view_.stored;
  if (joined_ && !assigned_ && stored && join_taken(*stored) && stored->waiter(node_id_))
    report_waiting(m->waiting);
}

// This node, joined and waiting for its round, in the running round the summary names: it
// answers it (formed) or takes its assignment (started), as react() does from the state.
bool EtcdMembership::take_round(const EtcdRoundSummary& m) {
  // The job's end, as react() takes it from the state.
  if (m.stop && view_.generation && m.generation == *view_.generation) {
    hooks_.fail(*m.stop);
    return true;
  }
  if (!joined_ || assigned_ || m.generation != *view_.generation || m.phase != Phase::running)
    return false;
  const auto at = std::find(m.members.begin(), m.members.end(), node_id_);
  if (at == m.members.end()) return false;
  if (m.started) {
    // The summary holds each member's ranks, not the offers of the peers this node's preflight
    // checks, nor the nodes' addresses that group rank 0's store admits: such a node takes its
    // assignment from the state, read once per round.
    if (m.assignments.empty() || preflight_) return false;
    const Assignment& a = m.assignments[at - m.members.begin()];
    if (a.group_rank == 0) return false;
    assigned_ = m.round;
    answering_.reset();
    if (events_.on_assignment) events_.on_assignment(a);
    return true;
  }
  // Another round this node answered never started: the state says why.
  if (answering_) return *answering_ == m.round;
  answering_ = m.round;
  hooks_.answer(m.round);
  return true;
}

// Whether the state has taken this node's latest join (so it is a member, a waiter, refused, or
// dropped since).
bool EtcdMembership::join_taken(const EtcdRoundState& s) const {
  auto it = s.joins_taken.find(node_id_);
  return !pending_join_ && it != s.joins_taken.end() && it->second >= join_seq_;
}

bool EtcdMembership::own_keys_pending() const {
  // Where this agent took changes in from their summaries since it read the state, what the
  // summary does not say (a join taken, a done) counts as not shown.
  if (answering_ && known_)
    return known_->round == *answering_ && known_->phase == Phase::running && !known_->started;
  if (view_.stored_mod_revision < seen_revision_)
    return (joined_ && !assigned_) || done_round_.has_value() || ended_round_.has_value();
  if (!view_.stored || view_.stored->generation != *view_.generation) return joined_ && !assigned_;
  const EtcdRoundState& s = *view_.stored;
  if (joined_ && !assigned_ && !join_taken(s)) return true;
  if (answering_ && s.round == *answering_ && s.phase == Phase::running && !s.started) return true;
  if (done_round_ && s.round == *done_round_ && s.phase == Phase::running &&
      !s.done.count(node_id_))
    return true;
  return ended_round_ && s.round == *ended_round_ && s.phase == Phase::concluding;
}

void EtcdMembership::assign(const EtcdRoundState& s) {
  std::size_t mine = 0;
  while (s.participants[mine].id != node_id_) ++mine;
  const Assignment a = round_.assignments(s)[mine];
  assigned_ = s.round;
  answering_.reset();
  if (events_.on_assignment) events_.on_assignment(a);
}

void EtcdMembership::report_waiting(std::size_t waiting) {
  const auto now = Clock::now();
  const int joined = static_cast<int>(waiting);
  const auto& r = options_;
  // A fixed-size round that every node has joined forms at once: nothing to wait for (as the
  // built-in rendezvous' node that completes it).
  if (r.min_nodes == r.max_nodes && joined >= r.max_nodes) return;
  if (joined == last_waiting_count_ && now - last_waiting_log_ < options_.status_interval) return;
  last_waiting_count_ = joined;
  last_waiting_log_ = now;
  hooks_.log(fmt::format(
      "waiting for nodes in etcd at {}: {}", endpoint_,
      r.min_nodes == r.max_nodes
          ? fmt::format("{} of {} joined", joined, r.min_nodes)
          : fmt::format("{} joined ({} to {} wanted)", joined, r.min_nodes, r.max_nodes)));
}

}  // namespace trainrun::rendezvous
