#include "round_rules.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "conclusion.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::rendezvous {
namespace {

using Phase = RoundState::Phase;

}  // namespace

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
  if (s.restart_count < forming_.options().max_restarts) {
    ++s.restart_count;
    forming_.restart(s, now,
                     Restart{RestartCause::worker_failed,
                             fmt::format("{}; restarting ({} of {})", reason, s.restart_count,
                                         count_of(forming_.options().max_restarts, "restart")),
                             s.restart_count, f},
                     d);
    return d;
  }
  s.reports = {{id, reported_failures(report)}};
  begin_concluding(s, now, no_restarts_left(forming_.options().max_restarts, s.restart_count), d);
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
    s.participants.erase(id);
    s.waiting.erase(id);
    s.awaiting.erase(id);
    s.done.erase(id);
    maybe_conclude(s, d);
    return d;
  }
  const bool was_participant = s.phase == Phase::running && p;
  s.participants.erase(id);
  s.waiting.erase(id);
  s.expected.erase(id);
  s.done.erase(id);
  if (!was_participant) {
    if (s.phase == Phase::forming) {
      if (s.waiting.empty()) s.forming_since.reset();
      forming_.complete_if_ready(s, now, d);
    }
    return d;
  }
  if (!s.started) {
    forming_.form_again(
        s, now,
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
  if (forming_.options().static_ranks) {
    end_job(s,
            Stop{StopCause::node_lost, reason + "; a static job cannot continue without it", 1,
                 std::nullopt},
            d);
  } else if (s.restart_count >= forming_.options().max_restarts) {
    end_job(s,
            Stop{StopCause::node_lost,
                 fmt::format("{}; no restarts left ({} of {} used)", reason, s.restart_count,
                             count_of(forming_.options().max_restarts, "restart")),
                 1, std::nullopt},
            d);
  } else if (remaining < forming_.options().min_nodes) {
    end_job(s,
            Stop{StopCause::node_lost,
                 fmt::format("{}; {} {}, fewer than the minimum of {}", reason,
                             count_of(remaining, "node"), remaining == 1 ? "remains" : "remain",
                             forming_.options().min_nodes),
                 1, std::nullopt},
            d);
  } else {
    ++s.restart_count;
    forming_.restart(s, now,
                     Restart{RestartCause::node_lost,
                             fmt::format("{}; continuing with {} ({} of {})", reason,
                                         count_of(remaining, "node"), s.restart_count,
                                         count_of(forming_.options().max_restarts, "restart")),
                             s.restart_count, std::nullopt},
                     d);
  }
  return d;
}

RoundDecision RoundRules::abort(RoundState& s, const std::string& id, const Abort& report) const {
  RoundDecision d;
  if (s.phase == Phase::ended || report.round != s.round || !s.participant(id)) return d;
  end_job(s, Stop{StopCause::preflight_failed, report.reason, 1, std::nullopt}, d);
  return d;
}

RoundDecision RoundRules::tick(RoundState& s, RoundTime now) const {
  RoundDecision d;
  if (s.phase == Phase::ended) return d;
  if (s.phase == Phase::forming) {
    forming_.tick_forming(s, now, d);
    return d;
  }
  if (s.phase == Phase::concluding && s.concluding_since &&
      now - *s.concluding_since >= forming_.options().join_timeout) {
    d.log.push_back(fmt::format(
        "{} did not say what failed within {:.0f} s (join timeout); ending without them",
        count_of(s.awaiting.size(), "node"), in_seconds(forming_.options().join_timeout)));
    s.awaiting.clear();
    d.changed = true;
    maybe_conclude(s, d);
    return d;
  }
  forming_.drop_stale_newcomers(s, now, d);
  return d;
}

RoundDecision RoundRules::end(RoundState& s, Stop stop) const {
  RoundDecision d;
  if (s.phase != Phase::ended) end_job(s, std::move(stop), d);
  return d;
}

std::optional<RoundTime> RoundRules::next_deadline(const RoundState& s) const {
  std::optional<RoundTime> best = forming_.next_deadline(s);
  if (s.phase == Phase::concluding && s.concluding_since) {
    const RoundTime t = *s.concluding_since + forming_.options().join_timeout;
    if (!best || t < *best) best = t;
  }
  return best;
}

Halt RoundRules::halt(const RoundState& s) const {
  return Halt{s.round, "a worker failed; the job ends"};
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
                              count_of(s.awaiting.size(), "node")));
  maybe_conclude(s, d);
}

// Once every node has said: the root cause by the one rule, the same stop for every node.
void RoundRules::maybe_conclude(RoundState& s, RoundDecision& d) const {
  if (s.phase != Phase::concluding || !s.awaiting.empty()) return;
  end_job(s, concluded_stop(s.reports, s.concluding_why), d);
}

}  // namespace trainrun::rendezvous
