#include "trainrun/launch/agent/agent_policy.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::launch {

namespace {

// Each action is built in place (emplace_back, never push_back or an initializer list): GCC 12
// takes a variant moved from a temporary for maybe-uninitialized.
template <class... A>
AgentActions actions(A&&... a) {
  AgentActions out;
  out.reserve(sizeof...(a));
  (out.emplace_back(std::forward<A>(a)), ...);
  return out;
}

// A stop that the job's other nodes brought about: it ran to its end, or failed.
bool ended_without_us(rendezvous::StopCause cause) {
  using rendezvous::StopCause;
  return cause == StopCause::finished || cause == StopCause::worker_failed ||
         cause == StopCause::node_lost;
}

}  // namespace

AgentPolicy::AgentPolicy(LaunchConfig config, std::string host, std::string one_node_master_addr)
    : config_(std::move(config)),
      host_(std::move(host)),
      one_node_master_addr_(std::move(one_node_master_addr)),
      max_restarts_(config_.max_restarts) {}

AgentActions AgentPolicy::start_single_node(int master_port, Clock::time_point) {
  topology_.group_rank = 0;
  topology_.group_world_size = 1;
  topology_.base_rank = 0;
  topology_.local_world_size = config_.nproc_per_node.number;
  topology_.world_size = config_.nproc_per_node.number;
  topology_.master_addr =
      !one_node_master_addr_.empty() ? one_node_master_addr_ : config_.master_addr;
  topology_.master_port = master_port;
  topology_.restart_count = 0;
  AgentActions out;
  start_attempt(out);
  return out;
}

AgentActions AgentPolicy::start_in_job(Clock::time_point) {
  in_job_ = true;
  state_ = State::idle;
  return actions(action::Join{});
}

AgentActions AgentPolicy::start_failed(const std::string& reason, int exit_code,
                                       Clock::time_point) {
  AgentActions out = actions(action::Say{reason, Level::error});
  start_failed_ = exit_code != 0 ? exit_code : 1;
  running_ = 0;
  state_ = State::finishing;
  if (in_job_) out.emplace_back(action::ShutdownRendezvous{reason});
  out.emplace_back(action::Sweep{0});
  return out;
}

AgentActions AgentPolicy::worker_exited(const WorkerExit& exit, Clock::time_point now) {
  AgentActions out;
  if (running_ > 0) --running_;
  if (exit.status.failed() && (state_ == State::running || stop_signal_ == 0))
    record_failure(out, exit, counts_as_failure(exit.status));
  if (state_ == State::running && exit.status.failed()) {
    report_failure(out);
    begin_stop(out, SIGTERM, now);
  }
  if (running_ == 0 && (state_ == State::running || state_ == State::stopping)) {
    state_ = State::finishing;
    out.emplace_back(action::Sweep{config_.shutdown_timeout});
  }
  return out;
}

AgentActions AgentPolicy::attempt_ended(Clock::time_point) {
  AgentActions out;
  if (state_ != State::finishing) return out;
  if (start_failed_ != 0)
    finish(out, start_failed_);
  else
    after_attempt(out);
  return out;
}

AgentActions AgentPolicy::signal(int sig, Clock::time_point now) {
  // A user signal (SIGUSR1: checkpoint now) is for the worker's handler; the processes it
  // started (a DataLoader's, Python's resource tracker) keep the default action, which kills.
  // SIGCONT cannot kill, and a stopped group needs all of it continued.
  if (forwarded(sig)) return actions(action::SignalWorkers{sig, sig == SIGCONT});
  if (state_ == State::stopping && stop_signal_ != 0) {
    // Asked twice: no more grace.
    return actions(
        action::Say{fmt::format("received {} again; killing the workers now", signal_name(sig)),
                    Level::warning},
        action::SignalWorkers{SIGKILL});
  }
  if (state_ == State::finishing || state_ == State::done) return {};
  // Between rounds (waiting for the rendezvous, or at its exit barrier) there is nothing to stop.
  AgentActions out = actions(action::Say{
      state_ == State::idle
          ? fmt::format("received {}; no worker is running: {}", signal_name(sig),
                        in_job_ ? "leaving the rendezvous" : "exiting")
          : fmt::format("received {}; stopping {} ({} s grace before SIGKILL)", signal_name(sig),
                        count_of(static_cast<long long>(running_), "worker"),
                        config_.shutdown_timeout)});
  stop_signal_ = sig;
  if (in_job_)
    out.emplace_back(
        action::ShutdownRendezvous{fmt::format("{} stopped by {}", host_, signal_name(sig))});
  if (state_ == State::idle)
    finish(out, 128 + sig);
  else
    begin_stop(out, sig, now);
  return out;
}

AgentActions AgentPolicy::grace_expired(Clock::time_point now) {
  if (state_ != State::stopping || now < grace_deadline_ || running_ == 0) return {};
  return actions(
      action::Say{fmt::format("{} still running {} s after the stop signal; sending SIGKILL",
                              count_of(static_cast<long long>(running_), "worker"),
                              config_.shutdown_timeout),
                  Level::warning},
      action::SignalWorkers{SIGKILL});
}

AgentActions AgentPolicy::assignment(const rendezvous::Assignment& a, Clock::time_point) {
  AgentActions out;
  if (state_ != State::idle) return out;
  topology_.group_rank = a.group_rank;
  topology_.group_world_size = a.group_world_size;
  topology_.base_rank = a.base_rank;
  topology_.local_world_size = a.local_world_size;
  topology_.world_size = a.world_size;
  // Alone in its job, this node's workers alone reach the store: torchrun 2.x's name for it.
  topology_.master_addr = config_.max_nodes == 1 && !one_node_master_addr_.empty()
                              ? one_node_master_addr_
                              : a.master_addr;
  topology_.master_port = a.master_port;
  topology_.restart_count = a.restart_count;
  max_restarts_ = a.max_restarts;
  start_attempt(out);
  return out;
}

AgentActions AgentPolicy::restart(const rendezvous::Restart& r, Clock::time_point now) {
  AgentActions out;
  if (state_ == State::done) return out;
  // Our own failure was reported and needs no second word (agents of one host tell theirs
  // apart by that, not by the host name).
  const bool ours = r.failure && r.failure->host == host_ && !failures_.empty();
  if (r.failure && !ours)
    out.emplace_back(
        action::Say{fmt::format("worker {} on {} failed with exit code {}; restarting ({} of {})",
                                r.failure->rank, r.failure->host, r.failure->exit_code,
                                r.restart_count, count_of(max_restarts_, "restart")),
                    Level::warning});
  else if (!r.failure)
    out.emplace_back(
        action::Say{fmt::format("{}; restarting the workers in a new round", r.reason)});
  pending_restart_ = true;
  if (state_ == State::running) begin_stop(out, SIGTERM, now);
  if (state_ == State::idle) after_attempt(out);
  return out;
}

AgentActions AgentPolicy::stop(const rendezvous::Stop& s, Clock::time_point now) {
  AgentActions out;
  if (state_ == State::done) return out;
  pending_stop_ = s;
  if (state_ == State::running) begin_stop(out, SIGTERM, now);
  if (state_ == State::idle) after_attempt(out);
  return out;
}

AgentActions AgentPolicy::halt(const rendezvous::Halt&, Clock::time_point now) {
  AgentActions out;
  if (state_ == State::done || pending_stop_) return out;
  halted_ = true;
  if (state_ == State::running) begin_stop(out, SIGTERM, now);
  if (state_ == State::idle) after_attempt(out);
  return out;
}

void AgentPolicy::start_attempt(AgentActions& out) {
  state_ = State::running;
  halted_ = false;
  failures_.clear();
  stop_signal_ = 0;
  pending_restart_ = false;
  reported_ = false;
  start_failed_ = 0;
  ran_ = true;
  running_ = static_cast<size_t>(config_.nproc_per_node.number);
  out.emplace_back(action::StartWorkers{topology_, max_restarts_});
}

// A failed exit counts while the group runs. Once this node stops it for a failure of its own,
// a worker that ended on its own (an exit code, a signal we did not send) failed too, as in
// torchrun's table of every failure; one that a SIGTERM or SIGKILL of ours ended did not, nor
// does any while the rendezvous stops the group (another node's failure, a new round).
bool AgentPolicy::counts_as_failure(const ExitStatus& status) const {
  if (pending_restart_ || pending_stop_ || halted_) return false;
  if (state_ == State::running) return true;
  return status.signal != SIGTERM && status.signal != SIGKILL;
}

void AgentPolicy::record_failure(AgentActions& out, const WorkerExit& exit, bool first_wave) {
  ProcessFailure f;
  f.local_rank = exit.local_rank;
  f.rank = topology_.base_rank + exit.local_rank;
  f.pid = exit.pid;
  f.status = exit.status;
  f.host = host_;
  f.timestamp = exit.seen_at;
  f.error_file = exit.error_file;
  f.stdout_log = exit.stdout_log;
  f.stderr_log = exit.stderr_log;
  if (exit.contents) {
    f.has_error_file = true;
    f.message = exit.contents->message;
    f.traceback = exit.contents->traceback;
    if (exit.contents->timestamp) f.timestamp = *exit.contents->timestamp;
  } else if (!exit.problem.empty()) {
    out.emplace_back(action::Say{
        fmt::format("worker {} (local rank {}): {}", f.rank, f.local_rank, exit.problem),
        Level::warning});
    // The worker left a report that cannot be shown: the summary names the file and why.
    f.has_error_file = true;
    f.message = exit.problem;
  }
  // A worker that left its own error report failed, whenever it ended.
  if (first_wave || f.has_error_file) failures_.push_back(std::move(f));
}

void AgentPolicy::stderr_tail(int local_rank, const std::string& tail) {
  for (auto& f : failures_)
    if (f.local_rank == local_rank && f.host == host_) f.stderr_tail = tail;
}

// Tells the other nodes about this node's first failure of the attempt.
void AgentPolicy::report_failure(AgentActions& out) {
  if (!in_job_ || reported_ || failures_.empty()) return;
  reported_ = true;
  const auto& root = failures_[root_cause_index(failures_)];
  rendezvous::FailureReport f;
  f.host = root.host;
  f.rank = root.rank;
  f.local_rank = root.local_rank;
  f.exit_code = root.status.shell_code();
  f.summary = format_failure_summary(config_.entrypoint, failures_, rendezvous::kMaxSummaryBytes);
  action::ReportFailure report{std::move(f), {}, 0};
  report.failures = relayed_failures(failures_, &report.not_relayed);
  out.emplace_back(std::move(report));
}

void AgentPolicy::begin_stop(AgentActions& out, int sig, Clock::time_point now) {
  state_ = State::stopping;
  grace_deadline_ =
      now + std::chrono::milliseconds(static_cast<long long>(config_.shutdown_timeout * 1000));
  out.emplace_back(action::SignalWorkers{sig});
  out.emplace_back(action::ArmGraceTimer{grace_deadline_});
}

// Every worker of this attempt has ended and nothing they started is left.
void AgentPolicy::after_attempt(AgentActions& out) {
  state_ = State::idle;
  if (stop_signal_ != 0) return finish(out, 128 + stop_signal_);
  if (in_job_) return after_attempt_in_job(out);
  if (failures_.empty()) return finish(out, 0);
  if (topology_.restart_count < config_.max_restarts) {
    const auto& root = failures_[root_cause_index(failures_)];
    ++topology_.restart_count;
    out.emplace_back(action::Say{
        fmt::format("worker {} (local rank {}) failed with exit code {}; restarting the worker "
                    "group ({} of {})",
                    root.rank, root.local_rank, root.status.shell_code(), topology_.restart_count,
                    count_of(config_.max_restarts, "restart")),
        Level::warning});
    return start_attempt(out);
  }
  fail_with_summary(out);
}

// The same decision when the rendezvous decides for the whole job.
void AgentPolicy::after_attempt_in_job(AgentActions& out) {
  if (pending_stop_) {
    const rendezvous::Stop& s = *pending_stop_;
    if (!ran_ && ended_without_us(s.cause)) {
      // Late, or waiting for a round that never came: torchrun's agent fails the same way (its
      // rendezvous is closed), so a scheduler sees that this node did no work.
      out.emplace_back(action::Say{
          fmt::format("the job ended before this node was given work ({}); it ran no workers",
                      s.reason.empty() ? std::string(to_string(s.cause)) : s.reason)});
      return finish(out, 1);
    }
    if (s.cause == rendezvous::StopCause::finished) return finish(out, 0);
    if (!s.failures.empty()) return fail_with_job_summary(out, s);
    if (s.failure && s.failure->host == host_ && !failures_.empty()) return fail_with_summary(out);
    // Another node's summary first (the job's root cause), then what failed here as well.
    if (s.failure && !s.failure->summary.empty())
      out.emplace_back(action::WriteSummary{escape_control(s.failure->summary, true)});
    if (!failures_.empty())
      out.emplace_back(action::WriteSummary{format_failure_summary(config_.entrypoint, failures_)});
    out.emplace_back(action::Say{s.reason.empty() ? "the job stopped" : s.reason, Level::error});
    return finish(out, s.exit_code != 0 ? s.exit_code : 1);
  }
  if (pending_restart_) {
    pending_restart_ = false;
    out.emplace_back(action::Join{});
    return;
  }
  if (halted_) {
    action::ReportEnded ended;
    ended.failures = relayed_failures(failures_, &ended.not_relayed);
    out.emplace_back(std::move(ended));
    return;
  }
  // Our own workers all succeeded: wait at the exit barrier; our failures were reported and
  // the decision is on its way.
  if (failures_.empty()) out.emplace_back(action::ReportDone{});
}

void AgentPolicy::fail_with_summary(AgentActions& out) {
  out.emplace_back(action::WriteSummary{format_failure_summary(config_.entrypoint, failures_)});
  const int code = failures_[root_cause_index(failures_)].status.shell_code();
  finish(out, code != 0 ? code : 1);
}

// The job's failures as the rendezvous decided them, the same on every node: the relayed list with
// this node's own failures shown whole, the root cause the one the rendezvous named (first).
void AgentPolicy::fail_with_job_summary(AgentActions& out, const rendezvous::Stop& s) {
  std::vector<ProcessFailure> job;
  for (const auto& w : s.failures) {
    auto own = std::find_if(failures_.begin(), failures_.end(), [&](const ProcessFailure& f) {
      return f.host == w.host && f.rank == w.rank && f.pid == w.pid;
    });
    job.push_back(own != failures_.end() ? *own : from_relayed(w));
  }
  out.emplace_back(action::WriteSummary{format_failure_summary(
      config_.entrypoint, job, 0, size_t{0}, static_cast<size_t>(s.not_relayed))});
  out.emplace_back(action::Say{s.reason.empty() ? "the job failed" : s.reason, Level::error});
  finish(out, s.exit_code != 0 ? s.exit_code : 1);
}

void AgentPolicy::finish(AgentActions& out, int exit_code) {
  state_ = State::done;
  out.emplace_back(action::Finish{exit_code});
}

bool AgentPolicy::forwarded(int sig) const {
  return std::find(config_.forward_signals.begin(), config_.forward_signals.end(), sig) !=
         config_.forward_signals.end();
}

}  // namespace trainrun::launch
