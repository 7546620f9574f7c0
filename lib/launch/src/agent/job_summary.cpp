#include "job_summary.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/version.hpp"

namespace trainrun::launch {

namespace {

using json = nlohmann::ordered_json;

json time_or_null(const std::optional<double>& t) { return t ? json(iso_time(*t)) : json(); }

json duration_or_null(double from, const std::optional<double>& to) {
  return to ? json(*to - from) : json();
}

json exit_fields(json j, const ExitStatus& status) {
  j["exit_code"] = status.signal != 0 ? json() : json(status.code);
  j["signal"] = status.signal != 0 ? json(signal_name(status.signal)) : json();
  return j;
}

json string_or_null(const std::string& s) { return s.empty() ? json() : json(s); }

json failure_json(const ProcessFailure& f) {
  json j = {{"host", f.host},
            {"rank", f.rank},
            {"local_rank", f.local_rank},
            {"pid", f.pid},
            {"time", iso_time(f.timestamp)},
            {"error_file", f.has_error_file ? json(f.error_file) : json()},
            {"message", string_or_null(f.message)},
            {"stdout_log", string_or_null(f.stdout_log)},
            {"stderr_log", string_or_null(f.stderr_log)},
            {"stderr_tail", string_or_null(f.stderr_tail)},
            {"teardown", string_or_null(f.teardown)}};
  return exit_fields(std::move(j), f.status);
}

json relayed_json(const rendezvous::WorkerFailure& w) {
  ExitStatus status;
  status.code = w.exit_code;
  status.signal = w.signal;
  json j = {{"host", w.host},
            {"rank", w.rank},
            {"local_rank", w.local_rank},
            {"pid", w.pid},
            {"time", iso_time(w.timestamp)},
            {"error_file", string_or_null(w.error_file)},
            {"message", string_or_null(w.message)},
            {"stdout_log", json()},
            {"stderr_log", json()},
            {"stderr_tail", json()},
            {"teardown", json()}};
  return exit_fields(std::move(j), status);
}

json report_json(const rendezvous::FailureReport& f) {
  return {
      {"host", f.host}, {"rank", f.rank}, {"local_rank", f.local_rank}, {"exit_code", f.exit_code}};
}

json worker_json(const JobSummary::Worker& w) {
  json j = {{"rank", w.rank},
            {"local_rank", w.local_rank},
            {"pid", w.pid},
            {"ended_at", iso_time(w.ended_at)},
            {"error_file", string_or_null(w.error_file)},
            {"message", string_or_null(w.message)},
            {"stdout_log", string_or_null(w.stdout_log)},
            {"stderr_log", string_or_null(w.stderr_log)},
            {"teardown", string_or_null(w.teardown)}};
  return exit_fields(std::move(j), w.status);
}

json attempt_json(const JobSummary::Attempt& a) {
  json workers = json::array();
  for (const auto& w : a.workers) workers.push_back(worker_json(w));
  const Topology& t = a.topology;
  return {{"restart_count", t.restart_count},
          {"node_rank", t.group_rank},
          {"nnodes", t.group_world_size},
          {"world_size", t.world_size},
          {"base_rank", t.base_rank},
          {"master_addr", t.master_addr},
          {"master_port", t.master_port},
          {"started_at", iso_time(a.started_at)},
          {"ended_at", time_or_null(a.ended_at)},
          {"duration_s", duration_or_null(a.started_at, a.ended_at)},
          {"startup", a.startup ? startup_json(*a.startup) : json()},
          {"workers", workers},
          {"root_cause",
           a.failures.empty() ? json() : failure_json(a.failures[root_cause_index(a.failures)])}};
}

}  // namespace

JobSummary::JobSummary(std::string host, std::string entrypoint, std::vector<std::string> args,
                       double started_at)
    : host_(std::move(host)),
      entrypoint_(std::move(entrypoint)),
      args_(std::move(args)),
      started_at_(started_at) {}

void JobSummary::on(const AgentEvent& event) {
  if (const auto* exited = std::get_if<event::WorkerExited>(&event)) {
    const WorkerExit& x = exited->exit;
    worker_exited(x.local_rank, x.pid, x.status, x.seen_at, x.contents ? x.error_file : "",
                  x.contents ? x.contents->message : "", x.stdout_log, x.stderr_log, x.teardown);
  } else if (const auto* hung = std::get_if<event::HangConfirmed>(&event)) {
    hang(hung->hang.hang);
  } else if (const auto* stop = std::get_if<event::Stop>(&event)) {
    stopped(stop->stop);
  }
}

void JobSummary::attempt_started(const Topology& topology, double now) {
  Attempt a;
  a.topology = topology;
  a.started_at = now;
  attempts_.push_back(std::move(a));
}

void JobSummary::startup(const AttemptStartup& startup) {
  if (!attempts_.empty()) attempts_.back().startup = startup;
}

void JobSummary::worker_exited(int local_rank, pid_t pid, ExitStatus status, double now,
                               const std::string& error_file, const std::string& message,
                               const std::string& stdout_log, const std::string& stderr_log,
                               const std::string& teardown) {
  if (attempts_.empty()) return;
  Attempt& a = attempts_.back();
  a.workers.push_back(Worker{a.topology.base_rank + local_rank, local_rank, pid, status, now,
                             error_file, message, stdout_log, stderr_log, teardown});
}

void JobSummary::attempt_ended(const std::vector<ProcessFailure>& failures, double now) {
  if (attempts_.empty() || attempts_.back().ended_at) return;
  attempts_.back().ended_at = now;
  attempts_.back().failures = failures;
}

void JobSummary::stopped(const rendezvous::Stop& stop) { stop_ = stop; }

void JobSummary::finished(int exit_code, double now, const std::string& error) {
  exit_code_ = exit_code;
  ended_at_ = now;
  error_ = error;
  if (!attempts_.empty() && !attempts_.back().ended_at) attempts_.back().ended_at = now;
}

std::string JobSummary::to_json() const {
  json attempts = json::array();
  for (const auto& a : attempts_) attempts.push_back(attempt_json(a));
  // The job ended with the last attempt: its own failures, else the failure another node
  // reported, else none (stopped by a signal, a lost node).
  json root_cause;
  std::string reason = error_;
  const bool failed = exit_code_.value_or(1) != 0;
  if (failed && !attempts_.empty() && !attempts_.back().failures.empty()) {
    const auto& failures = attempts_.back().failures;
    root_cause = failure_json(failures[root_cause_index(failures)]);
  }
  // The rendezvous named the job's root cause among every node's failures: the same on each node.
  json failures;
  if (stop_ && !stop_->failures.empty()) {
    // This node's own failures with all it knows of them (log files, stderr's end).
    auto entry = [&](const rendezvous::WorkerFailure& w) {
      if (!attempts_.empty())
        for (const auto& f : attempts_.back().failures)
          if (f.host == w.host && f.rank == w.rank && f.pid == w.pid) return failure_json(f);
      return relayed_json(w);
    };
    root_cause = entry(stop_->failures.front());
    failures = json::array();
    for (const auto& w : stop_->failures) failures.push_back(entry(w));
  }
  if (stop_ && stop_->cause != rendezvous::StopCause::finished) {
    if (reason.empty()) reason = stop_->reason;
    if (root_cause.is_null() && stop_->failure) root_cause = report_json(*stop_->failure);
  }
  const int code = exit_code_.value_or(1);
  std::string status = code == 0               ? "succeeded"
                       : !error_.empty()       ? "error"
                       : !root_cause.is_null() ? "failed"
                                               : "stopped";
  json j = {{"schema", "trainrun.job-summary/1"},
            {"trainrun_version", kVersion},
            {"host", host_},
            {"run_id", run_id_.empty() ? json() : json(run_id_)},
            {"log_dir", string_or_null(log_dir_)},
            {"entrypoint", entrypoint_},
            {"args", args_},
            {"status", status},
            {"exit_code", code},
            {"reason", reason.empty() ? json() : json(reason)},
            {"root_cause", root_cause},
            {"failures", failures},
            {"hang", hang_},
            {"restarts", attempts_.empty() ? 0 : attempts_.back().topology.restart_count},
            {"store_refused_connections", store_refused_},
            {"started_at", iso_time(started_at_)},
            {"ended_at", time_or_null(ended_at_)},
            {"duration_s", duration_or_null(started_at_, ended_at_)},
            {"attempts", attempts}};
  // The arguments, paths, run id and failure texts (stderr's end, error files) are bytes from
  // outside: what is not UTF-8 is written as U+FFFD, so the summary is always written.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

void write_summary_file(const std::string& path, JobSummary& summary, int exit_code,
                        const std::string& error) {
  if (path.empty()) return;
  summary.finished(exit_code, unix_time(), error);
  try {
    write_file_atomically(path, summary.to_json());
    say("job summary written to " + path, Level::debug);
  } catch (const LaunchError& e) {
    say(e.what(), Level::error);
  }
}

}  // namespace trainrun::launch
