#include "trainrun/rendezvous/round_rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "trainrun/base/wording.hpp"
#include "trainrun/rendezvous/conclusion.hpp"
#include "trainrun/rendezvous/rank_assignment.hpp"

namespace trainrun::rendezvous {
namespace {

using Phase = RoundState::Phase;

const RoundMember* find(const std::vector<RoundMember>& v, const std::string& id) {
  auto it = std::find_if(v.begin(), v.end(), [&](const RoundMember& m) { return m.id == id; });
  return it == v.end() ? nullptr : &*it;
}

bool erase(std::vector<RoundMember>& v, const std::string& id) {
  auto it = std::remove_if(v.begin(), v.end(), [&](const RoundMember& m) { return m.id == id; });
  const bool found = it != v.end();
  v.erase(it, v.end());
  return found;
}

bool same(const NodeDescriptor& a, const NodeDescriptor& b) {
  return std::tie(a.host, a.addr, a.pid, a.nproc, a.node_rank, a.master_port) ==
         std::tie(b.host, b.addr, b.pid, b.nproc, b.node_rank, b.master_port);
}

std::string nodes(std::size_t n) { return count_of(static_cast<long long>(n), "node"); }

}  // namespace

std::string describe(const RoundMember& m) {
  return fmt::format("{} ({}, pid {})", m.node.host, m.node.addr, m.node.pid);
}

const RoundMember* RoundState::participant(const std::string& id) const {
  return find(participants, id);
}
const RoundMember* RoundState::waiter(const std::string& id) const { return find(waiting, id); }

std::optional<Reject> RoundRules::refusal(const RoundState& s, const std::string& id,
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

RoundDecision RoundRules::join(RoundState& s, const std::string& id, const NodeDescriptor& node,
                               RoundTime now) const {
  RoundDecision d;
  if (s.phase == Phase::ended) return d;
  if ((d.refused = refusal(s, id, node))) return d;
  auto waiting = std::find_if(s.waiting.begin(), s.waiting.end(),
                              [&](const RoundMember& m) { return m.id == id; });
  if (waiting != s.waiting.end()) {
    d.changed = !same(waiting->node, node);
    waiting->node = node;
    return d;
  }
  d.changed = true;
  s.waiting.push_back(RoundMember{id, node, now});
  if (s.phase == Phase::forming) {
    if (!s.forming_since) s.forming_since = now;
    maybe_complete(s, now, d);
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
  begin_forming(
      s, now,
      Restart{RestartCause::scale_up,
              fmt::format("node {} joined: scaling up from {}", who, nodes(s.participants.size())),
              s.restart_count, std::nullopt},
      d);
  return d;
}

RoundDecision RoundRules::start(RoundState& s) const {
  RoundDecision d;
  if (s.phase != Phase::running || s.started) return d;
  s.started = true;
  d.changed = true;
  return d;
}

RoundDecision RoundRules::failure(RoundState& s, const std::string& id, const Failure& report,
                                  RoundTime now) const {
  RoundDecision d;
  if (report.round != s.round || !s.participant(id)) return d;
  if (s.phase == Phase::concluding) {
    // A node that fails again before it has stopped: its latest word counts.
    s.reports[id] = Ended{report.round, report.failures, report.not_relayed};
    d.changed = true;
    return d;
  }
  // Reports from an earlier round (workers dying while being stopped) must not count twice.
  if (s.phase != Phase::running) return d;
  d.changed = true;
  const FailureReport& f = report.failure;
  const std::string reason =
      fmt::format("worker failed on {}: rank {} (local rank {}) exited with code {}", f.host,
                  f.rank, f.local_rank, f.exit_code);
  if (s.restart_count < options_.max_restarts) {
    ++s.restart_count;
    begin_forming(s, now,
                  Restart{RestartCause::worker_failed,
                          fmt::format("{}; restarting ({} of {})", reason, s.restart_count,
                                      count_of(options_.max_restarts, "restart")),
                          s.restart_count, f},
                  d);
    return d;
  }
  s.reports = {{id, reported_failures(report)}};
  begin_concluding(s, now, no_restarts_left(options_.max_restarts, s.restart_count), d);
  return d;
}

RoundDecision RoundRules::done(RoundState& s, const std::string& id, std::uint64_t round) const {
  RoundDecision d;
  // Its workers all succeeded before it heard of the failure: it has nothing to add.
  if (s.phase == Phase::concluding && round == s.round && s.awaiting.erase(id)) {
    d.changed = true;
    maybe_conclude(s, d);
    return d;
  }
  if (s.phase != Phase::running || round != s.round || !s.participant(id)) return d;
  if (!s.done.insert(id).second) return d;
  d.changed = true;
  if (s.done.size() == s.participants.size()) {
    end_job(s,
            Stop{StopCause::finished,
                 s.participants.size() == 1
                     ? std::string("the node finished")
                     : fmt::format("all {} nodes finished", s.participants.size()),
                 0, std::nullopt},
            d);
  }
  return d;
}

RoundDecision RoundRules::ended(RoundState& s, const std::string& id, const Ended& report) const {
  RoundDecision d;
  if (s.phase != Phase::concluding || report.round != s.round || !s.awaiting.count(id)) return d;
  take_report(s.reports, id, report);
  s.awaiting.erase(id);
  d.changed = true;
  maybe_conclude(s, d);
  return d;
}

RoundDecision RoundRules::lost(RoundState& s, const std::string& id, const std::string& why,
                               RoundTime now) const {
  RoundDecision d;
  if (s.phase == Phase::ended) return d;
  const RoundMember* p = s.participant(id);
  const RoundMember* w = s.waiter(id);
  if (!p && !w && !s.expected.count(id)) return d;
  d.changed = true;
  const std::string who = p ? describe(*p) : w ? describe(*w) : id;
  if (p || w) d.log.push_back(fmt::format("node {} lost: {}", who, why));
  if (s.phase == Phase::concluding && p) {
    // What it reported before it went stays in the job's list; it is not waited for.
    erase(s.participants, id);
    erase(s.waiting, id);
    s.awaiting.erase(id);
    s.done.erase(id);
    maybe_conclude(s, d);
    return d;
  }
  const bool was_participant = s.phase == Phase::running && p;
  erase(s.participants, id);
  erase(s.waiting, id);
  s.expected.erase(id);
  s.done.erase(id);
  if (!was_participant) {
    if (s.phase == Phase::forming) {
      if (s.waiting.empty()) s.forming_since.reset();
      maybe_complete(s, now, d);
    }
    return d;
  }
  if (!s.started) {
    form_again(s, now,
               Restart{RestartCause::node_lost,
                       fmt::format("node {} lost before round {} started: it never answered ({}); "
                                   "forming the round again without it",
                                   who, s.round, why),
                       s.restart_count, std::nullopt},
               d);
    return d;
  }
  const std::string reason = fmt::format("node {} lost ({})", who, why);
  const int remaining = static_cast<int>(s.participants.size() + s.waiting.size());
  if (options_.static_ranks) {
    end_job(s,
            Stop{StopCause::node_lost, reason + "; a static job cannot continue without it", 1,
                 std::nullopt},
            d);
  } else if (s.restart_count >= options_.max_restarts) {
    end_job(s,
            Stop{StopCause::node_lost,
                 fmt::format("{}; no restarts left ({} of {} used)", reason, s.restart_count,
                             count_of(options_.max_restarts, "restart")),
                 1, std::nullopt},
            d);
  } else if (remaining < options_.min_nodes) {
    end_job(s,
            Stop{StopCause::node_lost,
                 fmt::format("{}; {} {}, fewer than the minimum of {}", reason,
                             count_of(remaining, "node"), remaining == 1 ? "remains" : "remain",
                             options_.min_nodes),
                 1, std::nullopt},
            d);
  } else {
    ++s.restart_count;
    begin_forming(s, now,
                  Restart{RestartCause::node_lost,
                          fmt::format("{}; continuing with {} ({} of {})", reason,
                                      count_of(remaining, "node"), s.restart_count,
                                      count_of(options_.max_restarts, "restart")),
                          s.restart_count, std::nullopt},
                  d);
  }
  return d;
}

RoundDecision RoundRules::tick(RoundState& s, RoundTime now) const {
  RoundDecision d;
  if (s.phase == Phase::ended) return d;
  if (s.phase == Phase::forming) {
    maybe_complete(s, now, d);
    if (s.phase == Phase::forming && s.forming_since &&
        now - *s.forming_since >= options_.join_timeout) {
      const int need = count_requirement();
      const int have = static_cast<int>(s.waiting.size());
      end_job(
          s,
          Stop{StopCause::join_timeout,
               fmt::format("timed out after {:.0f} s waiting for nodes at {}: {} of {} "
                           "joined, {} missing",
                           in_seconds(options_.join_timeout), endpoint_, have, need, need - have),
               1, std::nullopt},
          d);
    }
    return d;
  }
  if (s.phase == Phase::concluding && s.concluding_since &&
      now - *s.concluding_since >= options_.join_timeout) {
    d.log.push_back(fmt::format(
        "{} did not say what failed within {:.0f} s (join timeout); ending without them",
        nodes(s.awaiting.size()), in_seconds(options_.join_timeout)));
    s.awaiting.clear();
    d.changed = true;
    maybe_conclude(s, d);
    return d;
  }
  // Newcomers waiting on a job that is full give up after the join timeout.
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (now - it->joined_at >= options_.join_timeout) {
      d.dropped.push_back(it->id);
      it = s.waiting.erase(it);
      d.changed = true;
    } else {
      ++it;
    }
  }
  return d;
}

RoundDecision RoundRules::end(RoundState& s, Stop stop) const {
  RoundDecision d;
  if (s.phase != Phase::ended) end_job(s, std::move(stop), d);
  return d;
}

std::optional<RoundTime> RoundRules::next_deadline(const RoundState& s) const {
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
  if (s.phase == Phase::concluding && s.concluding_since) {
    keep(*s.concluding_since + options_.join_timeout);
  }
  return best;
}

std::vector<Assignment> RoundRules::assignments(const RoundState& s) const {
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

Halt RoundRules::halt(const RoundState& s) const {
  return Halt{s.round, "a worker failed; the job ends"};
}

Stop RoundRules::full_job_stop() const {
  return Stop{StopCause::join_timeout,
              fmt::format("timed out after {:.0f} s: the job at {} is running with its maximum "
                          "of {}",
                          in_seconds(options_.join_timeout), endpoint_,
                          count_of(options_.max_nodes, "node")),
              1, std::nullopt};
}

void RoundRules::maybe_complete(RoundState& s, RoundTime now, RoundDecision& d) const {
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

void RoundRules::complete(RoundState& s, std::size_t count, RoundDecision& d) const {
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
                              s.round, nodes(s.participants.size()), a.world_size, a.master_addr,
                              a.master_port, s.restart_count));
}

// The round's members must join the next round afresh; the nodes waiting stay in line.
void RoundRules::begin_forming(RoundState& s, RoundTime now, Restart restart,
                               RoundDecision& d) const {
  d.log.push_back(fmt::format("round {} ends: {}", s.round, restart.reason));
  s.expected.clear();
  for (const RoundMember& m : s.participants) {
    s.expected.insert(m.id);
    d.restarted.push_back(m.id);
  }
  for (const RoundMember& m : s.waiting) s.expected.insert(m.id);
  s.participants.clear();
  next_round(s, now, std::move(restart), d);
}

// A round that never started: its members go back to the head of the line, in their order (they
// need not join again), and it forms at once when enough of them are there.
void RoundRules::form_again(RoundState& s, RoundTime now, Restart why, RoundDecision& d) const {
  s.waiting.insert(s.waiting.begin(), s.participants.begin(), s.participants.end());
  s.participants.clear();
  s.expected.clear();
  for (const RoundMember& m : s.waiting) s.expected.insert(m.id);
  next_round(s, now, std::move(why), d);
}

// What every new round starts from, however its members were chosen.
void RoundRules::next_round(RoundState& s, RoundTime now, Restart restart, RoundDecision& d) const {
  d.changed = true;
  s.started = false;
  s.done.clear();
  s.phase = Phase::forming;
  ++s.round;
  s.restart = std::move(restart);
  s.forming_since = now;
  s.min_reached_at.reset();
  maybe_complete(s, now, d);
}

// Every member not done stops its workers and says what failed; the stop waits for them (or
// their loss, or the join timeout).
void RoundRules::begin_concluding(RoundState& s, RoundTime now, std::string why,
                                  RoundDecision& d) const {
  s.phase = Phase::concluding;
  s.concluding_why = std::move(why);
  s.concluding_since = now;
  s.awaiting.clear();
  for (const RoundMember& m : s.participants) {
    if (s.done.count(m.id)) continue;
    s.awaiting.insert(m.id);
    d.halted.push_back(m.id);
  }
  d.log.push_back(fmt::format("round {} ends: a worker failed; waiting for {} to report", s.round,
                              nodes(s.awaiting.size())));
  maybe_conclude(s, d);
}

// Once every node has said: the root cause by the one rule, the same stop for every node.
void RoundRules::maybe_conclude(RoundState& s, RoundDecision& d) const {
  if (s.phase != Phase::concluding || !s.awaiting.empty()) return;
  end_job(s, concluded_stop(s.reports, s.concluding_why), d);
}

void RoundRules::end_job(RoundState& s, Stop stop, RoundDecision& d) const {
  d.log.push_back(fmt::format("job ends ({}): {}", to_string(stop.cause), stop.reason));
  d.changed = true;
  d.ended = true;
  s.phase = Phase::ended;
  s.stop = std::move(stop);
  s.waiting.clear();
  s.participants.clear();
  s.started = false;
  s.expected.clear();
  s.done.clear();
  s.awaiting.clear();
  s.reports.clear();
  s.concluding_since.reset();
  s.concluding_why.clear();
}

}  // namespace trainrun::rendezvous
