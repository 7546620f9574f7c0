#include "conclusion.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::rendezvous {

Ended reported_failures(const Failure& report) {
  Ended ended{report.round, report.failures, report.not_relayed};
  if (ended.failures.empty()) {
    const FailureReport& f = report.failure;
    WorkerFailure w;
    w.host = f.host;
    w.rank = f.rank;
    w.local_rank = f.local_rank;
    w.exit_code = f.exit_code;
    w.message = std::string(utf8_prefix(f.summary, kMaxRelayedTraceback));
    ended.failures.push_back(std::move(w));
  }
  return ended;
}

std::string no_restarts_left(int max_restarts, int restart_count) {
  return max_restarts == 0 ? std::string()
                           : fmt::format("no restarts left ({} used)", restart_count);
}

Stop concluded_stop(const std::vector<Ended>& reports, const std::string& why) {
  std::vector<WorkerFailure> all;
  int not_relayed = 0;
  for (const Ended& e : reports) {
    all.insert(all.end(), e.failures.begin(), e.failures.end());
    not_relayed += e.not_relayed;
  }
  // The earliest first, by the same rule: the root cause leads the list.
  std::stable_sort(all.begin(), all.end(), failed_before<WorkerFailure>);
  if (all.size() > kMaxRelayedFailures) {
    not_relayed += static_cast<int>(all.size() - kMaxRelayedFailures);
    all.resize(kMaxRelayedFailures);
  }
  fit_failures(all, not_relayed, kMaxRelayedFailureBytes);
  const WorkerFailure& root = all.front();
  const int code = root.shell_code();
  std::string reason = fmt::format(
      "worker failed on {}: rank {} (local rank {}) {}", root.host, root.rank, root.local_rank,
      root.signal != 0 ? fmt::format("was killed by signal {}", root.signal)
                       : fmt::format("exited with code {}", root.exit_code));
  const std::size_t total = all.size() + static_cast<std::size_t>(not_relayed);
  if (total > 1)
    reason +=
        fmt::format(" (the earliest of {})", count_of(static_cast<long long>(total), "failure"));
  if (!why.empty()) reason += "; " + why;
  Stop stop{StopCause::worker_failed, reason, code > 0 ? code : 1,
            FailureReport{root.host, root.rank, root.local_rank, code, ""}};
  stop.failures = std::move(all);
  stop.not_relayed = not_relayed;
  return stop;
}

void fit_failures(std::vector<WorkerFailure>& failures, int& not_relayed, std::size_t max_bytes) {
  std::size_t used = 0;
  std::size_t kept = 0;
  for (; kept < failures.size(); ++kept) {
    // Each as its own one-element list: a little more than its share of the whole list.
    used += encode(ClientMessage{Ended{0, {failures[kept]}, 0}}).size();
    if (kept > 0 && used > max_bytes) break;
  }
  not_relayed += static_cast<int>(failures.size() - kept);
  failures.resize(kept);
}

}  // namespace trainrun::rendezvous
