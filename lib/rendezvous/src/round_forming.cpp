#include "round_forming.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "rank_assignment.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::rendezvous {
namespace {

using Phase = RoundState::Phase;

bool same(const NodeDescriptor& a, const NodeDescriptor& b) {
  return std::tie(a.host, a.addr, a.pid, a.nproc, a.node_rank, a.master_port, a.last_rank,
                  a.at_endpoint, a.seen_addr) == std::tie(b.host, b.addr, b.pid, b.nproc,
                                                          b.node_rank, b.master_port, b.last_rank,
                                                          b.at_endpoint, b.seen_addr);
}

}  // namespace

std::optional<Reject> RoundForming::refusal(const RoundState& s, const std::string& id,
                                            const NodeDescriptor& node) const {
  if ((s.phase == Phase::running || s.phase == Phase::concluding) && s.participant(id)) {
    return Reject{"joined again while its round is running"};
  }
  if (!options_.static_ranks) {
    if (node.master_port <= 0) return Reject{"join carries no reserved master_port"};
    return std::nullopt;
  }
  if (node.node_rank < 0 || node.node_rank >= options_.max_nodes) {
    return Reject{
        fmt::format("node rank {} is out of range: this job has {} (0..{})", node.node_rank,
                    count_of(options_.max_nodes, "node"), options_.max_nodes - 1),
        Refusal::node_rank};
  }
  for (const auto* list : {&s.waiting, &s.participants}) {
    for (const RoundMember& m : *list) {
      if (m.id != id && m.node.node_rank == node.node_rank) {
        return Reject{
            fmt::format("node rank {} is already taken by {}", node.node_rank, describe(m)),
            Refusal::rank_taken};
      }
    }
  }
  return std::nullopt;
}

RoundDecision RoundForming::join(RoundState& s, const std::string& id, const NodeDescriptor& node,
                                 RoundTime now) const {
  RoundDecision d;
  if (s.phase == Phase::ended) return d;
  if ((d.refused = refusal(s, id, node))) return d;
  if (RoundMember* waiting = s.waiting.find(id)) {
    d.changed = !same(waiting->node, node);
    waiting->node = node;
    return d;
  }
  d.changed = true;
  s.waiting.push_back(RoundMember{id, node, now});
  if (s.phase == Phase::forming) {
    if (!s.forming_since) s.forming_since = now;
    complete_if_ready(s, now, d);
    return d;
  }
  // Concluding: it waits, and gets the job's stop.
  const bool can_grow = s.phase == Phase::running && !options_.static_ranks &&
                        static_cast<int>(s.participants.size()) < options_.max_nodes &&
                        s.done.empty();
  if (!can_grow) return d;
  const std::string who = describe(s.waiting.back());
  if (!s.started) {
    // Nobody runs workers yet: take the newcomer in without a restart.
    form_again(s, now,
               Restart{RestartCause::scale_up,
                       fmt::format("node {} joined before round {} started: forming it again", who,
                                   s.round),
                       s.restart_count, std::nullopt},
               d);
    return d;
  }
  restart(s, now,
          Restart{RestartCause::scale_up,
                  fmt::format("node {} joined: scaling up from {}", who,
                              count_of(s.participants.size(), "node")),
                  s.restart_count, std::nullopt},
          d);
  return d;
}

RoundDecision RoundForming::start(RoundState& s) const {
  RoundDecision d;
  if (s.phase != Phase::running || s.started) return d;
  s.started = true;
  d.changed = true;
  return d;
}

void RoundForming::tick_forming(RoundState& s, RoundTime now, RoundDecision& d) const {
  complete_if_ready(s, now, d);
  if (s.phase == Phase::forming && s.forming_since &&
      now - *s.forming_since >= options_.join_timeout) {
    const int need = count_requirement();
    const int have = static_cast<int>(s.waiting.size());
    end_job(s,
            Stop{StopCause::join_timeout,
                 fmt::format("timed out after {:.0f} s waiting for nodes at {}: {} of {} "
                             "joined, {} missing",
                             in_seconds(options_.join_timeout), endpoint_, have, need, need - have),
                 1, std::nullopt},
            d);
  }
}

void RoundForming::drop_stale_newcomers(RoundState& s, RoundTime now, RoundDecision& d) const {
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (now - it->joined_at >= options_.join_timeout) {
      d.dropped.push_back(it->id);
      it = s.waiting.erase(it);
      d.changed = true;
    } else {
      ++it;
    }
  }
}

std::optional<RoundTime> RoundForming::next_deadline(const RoundState& s) const {
  std::optional<RoundTime> best;
  auto keep = [&](RoundTime t) {
    if (!best || t < *best) best = t;
  };
  if (s.phase == Phase::ended) return best;
  if (s.phase == Phase::forming) {
    if (s.min_reached_at) keep(*s.min_reached_at + options_.last_call_timeout);
    if (s.forming_since) keep(*s.forming_since + options_.join_timeout);
    return best;
  }
  for (const RoundMember& m : s.waiting) keep(m.joined_at + options_.join_timeout);
  return best;
}

std::vector<Assignment> RoundForming::assignments(const RoundState& s) const {
  std::vector<NodeDescriptor> nodes;
  nodes.reserve(s.participants.size());
  for (const RoundMember& m : s.participants) nodes.push_back(m.node);
  std::vector<Assignment> a =
      assign_ranks(nodes, s.round, options_.static_ranks,
                   options_.static_ranks ? &options_.static_master : nullptr);
  for (Assignment& each : a) {
    each.restart_count = s.restart_count;
    each.max_restarts = options_.max_restarts;
  }
  return a;
}

Stop RoundForming::full_job_stop() const {
  return Stop{StopCause::join_timeout,
              fmt::format("timed out after {:.0f} s: the job at {} is running with its maximum "
                          "of {}",
                          in_seconds(options_.join_timeout), endpoint_,
                          count_of(options_.max_nodes, "node")),
              1, std::nullopt};
}

void RoundForming::complete_if_ready(RoundState& s, RoundTime now, RoundDecision& d) const {
  if (s.phase != Phase::forming) return;
  const int n = static_cast<int>(s.waiting.size());
  if (n < count_requirement()) {
    if (s.min_reached_at) d.changed = true;
    s.min_reached_at.reset();
    return;
  }
  if (!s.min_reached_at) {
    s.min_reached_at = now;
    d.changed = true;
  }
  if (options_.static_ranks || n >= options_.max_nodes) {
    return complete(s, static_cast<std::size_t>(options_.max_nodes), d);
  }
  // After a restart the survivors are known: once they are all back there is nobody to wait for.
  const bool all_expected_back =
      !s.expected.empty() && std::all_of(s.expected.begin(), s.expected.end(),
                                         [&](const std::string& e) { return s.waiter(e); });
  if (all_expected_back || now - *s.min_reached_at >= options_.last_call_timeout) {
    complete(s, s.waiting.size(), d);
  }
}

void RoundForming::complete(RoundState& s, std::size_t count, RoundDecision& d) const {
  const auto take = static_cast<long>(std::min(count, s.waiting.size()));
  s.participants.assign(s.waiting.begin(), s.waiting.begin() + take);
  s.waiting.erase(s.waiting.begin(), s.waiting.begin() + take);
  s.phase = Phase::running;
  s.started = false;
  s.done.clear();
  s.expected.clear();
  s.forming_since.reset();
  s.min_reached_at.reset();
  d.changed = true;
  d.formed = assignments(s);
  const Assignment& a = d.formed.front();
  d.log.push_back(fmt::format("round {} formed: {}, world size {}, master {}:{}, restart {}",
                              s.round, count_of(s.participants.size(), "node"), a.world_size,
                              a.master_addr, a.master_port, s.restart_count));
}

void RoundForming::restart(RoundState& s, RoundTime now, Restart why, RoundDecision& d) const {
  d.log.push_back(fmt::format("round {} ends: {}", s.round, why.reason));
  s.expected.clear();
  for (const RoundMember& m : s.participants) {
    s.expected.insert(m.id);
    d.restarted.push_back(m.id);
  }
  for (const RoundMember& m : s.waiting) s.expected.insert(m.id);
  s.participants.clear();
  next_round(s, now, std::move(why), d);
}

// In their order (they need not join again); it forms at once when enough of them are there.
void RoundForming::form_again(RoundState& s, RoundTime now, Restart why, RoundDecision& d) const {
  s.waiting.insert(s.waiting.begin(), s.participants.begin(), s.participants.end());
  s.participants.clear();
  s.expected.clear();
  for (const RoundMember& m : s.waiting) s.expected.insert(m.id);
  next_round(s, now, std::move(why), d);
}

// What every new round starts from, however its members were chosen.
void RoundForming::next_round(RoundState& s, RoundTime now, Restart restart,
                              RoundDecision& d) const {
  d.changed = true;
  s.started = false;
  s.done.clear();
  s.phase = Phase::forming;
  ++s.round;
  s.restart = std::move(restart);
  s.forming_since = now;
  s.min_reached_at.reset();
  complete_if_ready(s, now, d);
}

}  // namespace trainrun::rendezvous
