#include "attempt_failures.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::launch {

namespace {

// A stop that the job's other nodes brought about: it ran to its end, or failed.
bool ended_without_us(rendezvous::StopCause cause) {
  using rendezvous::StopCause;
  return cause == StopCause::finished || cause == StopCause::worker_failed ||
         cause == StopCause::node_lost;
}

}  // namespace

AttemptFailures::AttemptFailures(std::string entrypoint, std::string host)
    : entrypoint_(std::move(entrypoint)), host_(std::move(host)) {}

void AttemptFailures::clear() {
  failures_.clear();
  reported_ = false;
  hang_said_.reset();
}

void AttemptFailures::add_hang(ProcessFailure failure) {
  hang_said_ = failure;
  failures_.push_back(std::move(failure));
}

bool AttemptFailures::is_hang_said(const ProcessFailure& f) const {
  return hang_said_ && f.host == hang_said_->host && f.rank == hang_said_->rank &&
         f.pid == hang_said_->pid && f.status.code == hang_said_->status.code &&
         f.status.signal == hang_said_->status.signal;
}

std::vector<ProcessFailure> AttemptFailures::as_shown_here(std::vector<ProcessFailure> list) const {
  for (auto& f : list)
    if (is_hang_said(f))
      f.traceback = fmt::format("hung: the line \"trainrun: the job is hung\" above says where{}",
                                f.has_error_file ? "; the report is the error_file" : "");
  return list;
}

std::optional<std::string> AttemptFailures::record(const WorkerExit& exit, int base_rank,
                                                   bool counts) {
  std::optional<std::string> warning;
  ProcessFailure f;
  f.local_rank = exit.local_rank;
  f.rank = base_rank + exit.local_rank;
  f.pid = exit.pid;
  f.status = exit.status;
  f.host = host_;
  f.timestamp = exit.seen_at;
  f.error_file = exit.error_file;
  f.stdout_log = exit.stdout_log;
  f.stderr_log = exit.stderr_log;
  f.teardown = exit.teardown;
  if (exit.contents) {
    f.has_error_file = true;
    f.message = exit.contents->message;
    f.traceback = exit.contents->traceback;
    if (exit.contents->timestamp) f.timestamp = *exit.contents->timestamp;
  } else if (!exit.problem.empty()) {
    warning = fmt::format("worker {} (local rank {}): {}", f.rank, f.local_rank, exit.problem);
    // The worker left a report that cannot be shown: the summary names the file and why.
    f.has_error_file = true;
    f.message = exit.problem;
  }
  // A rank is listed once, with one exit code: a hang found in it is its failure already.
  const bool listed = std::any_of(failures_.begin(), failures_.end(), [&](const ProcessFailure& o) {
    return o.host == f.host && o.rank == f.rank && o.pid == f.pid;
  });
  // A worker that left its own error report failed, whenever it ended.
  if (!listed && (counts || f.has_error_file)) failures_.push_back(std::move(f));
  return warning;
}

void AttemptFailures::stderr_tails(const std::vector<std::string>& tails) {
  // A hang's traceback is its report, not what the rank wrote when it was stopped.
  for (auto& f : failures_)
    if (f.host == host_ && f.local_rank >= 0 && static_cast<size_t>(f.local_rank) < tails.size() &&
        !is_hang_said(f))
      f.stderr_tail = tails[static_cast<size_t>(f.local_rank)];
}

std::optional<action::ReportFailure> AttemptFailures::report() {
  if (reported_ || failures_.empty()) return std::nullopt;
  reported_ = true;
  const auto& root = failures_[root_cause_index(failures_)];
  rendezvous::FailureReport f;
  f.host = root.host;
  f.rank = root.rank;
  f.local_rank = root.local_rank;
  f.exit_code = root.status.shell_code();
  f.summary = format_failure_summary(entrypoint_, failures_, rendezvous::kMaxSummaryBytes);
  action::ReportFailure report{std::move(f), {}, 0};
  report.failures = relayed_failures(failures_, &report.not_relayed);
  return report;
}

action::ReportEnded AttemptFailures::ended() const {
  action::ReportEnded ended;
  ended.failures = relayed_failures(failures_, &ended.not_relayed);
  return ended;
}

std::string AttemptFailures::restart_line(int restart, int max_restarts) const {
  const auto& root = failures_[root_cause_index(failures_)];
  return fmt::format(
      "worker {} (local rank {}) failed with exit code {}; restarting the worker group ({} of {})",
      root.rank, root.local_rank, root.status.shell_code(), restart,
      count_of(max_restarts, "restart"));
}

std::optional<std::string> AttemptFailures::restart_line(const rendezvous::Restart& r,
                                                         int max_restarts) const {
  // Our own failure was reported and needs no second word (agents of one host tell theirs
  // apart by that, not by the host name).
  if (!r.failure || ours(r.failure)) return std::nullopt;
  return fmt::format("worker {} on {} failed with exit code {}; restarting ({} of {})",
                     r.failure->rank, r.failure->host, r.failure->exit_code, r.restart_count,
                     count_of(max_restarts, "restart"));
}

int AttemptFailures::fail(AgentActions& out) const {
  out.emplace_back(
      action::WriteSummary{format_failure_summary(entrypoint_, as_shown_here(failures_))});
  const int code = failures_[root_cause_index(failures_)].status.shell_code();
  return code != 0 ? code : 1;
}

int AttemptFailures::stopped(AgentActions& out, const rendezvous::Stop& s, bool ran) const {
  if (!ran && ended_without_us(s.cause)) {
    // Late, or waiting for a round that never came: torchrun's agent fails the same way (its
    // rendezvous is closed), so a scheduler sees that this node did no work.
    out.emplace_back(action::Say{
        fmt::format("the job ended before this node was given work ({}); it ran no workers",
                    s.reason.empty() ? std::string(to_string(s.cause)) : s.reason)});
    return 1;
  }
  if (s.cause == rendezvous::StopCause::finished) return 0;
  if (!s.failures.empty()) return fail_with_job(out, s);
  if (ours(s.failure)) return fail(out);
  // Another node's summary first (the job's root cause), then what failed here as well.
  if (s.failure && !s.failure->summary.empty())
    out.emplace_back(action::WriteSummary{escape_control(s.failure->summary, true)});
  if (!failures_.empty())
    out.emplace_back(
        action::WriteSummary{format_failure_summary(entrypoint_, as_shown_here(failures_))});
  out.emplace_back(action::Say{s.reason.empty() ? "the job stopped" : s.reason, Level::error});
  return s.exit_code != 0 ? s.exit_code : 1;
}

// The list is the relayed one, the same on every node, with this node's own failures shown whole;
// the root cause is the one the rendezvous named (first).
int AttemptFailures::fail_with_job(AgentActions& out, const rendezvous::Stop& s) const {
  std::vector<ProcessFailure> job;
  for (const auto& w : s.failures) {
    auto own = std::find_if(failures_.begin(), failures_.end(), [&](const ProcessFailure& f) {
      return f.host == w.host && f.rank == w.rank && f.pid == w.pid;
    });
    job.push_back(own != failures_.end() ? *own : from_relayed(w));
  }
  out.emplace_back(
      action::WriteSummary{format_failure_summary(entrypoint_, as_shown_here(std::move(job)), 0,
                                                  size_t{0}, static_cast<size_t>(s.not_relayed))});
  out.emplace_back(action::Say{s.reason.empty() ? "the job failed" : s.reason, Level::error});
  return s.exit_code != 0 ? s.exit_code : 1;
}

bool AttemptFailures::ours(const std::optional<rendezvous::FailureReport>& f) const {
  return f && f->host == host_ && !failures_.empty();
}

}  // namespace trainrun::launch
