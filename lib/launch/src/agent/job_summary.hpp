#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent_events.hpp"
#include "attempt_startup.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What --summary-file records of one node's job: every attempt with its workers' exits, the root
// cause and the final status. The agent feeds it events as they happen (times in unix seconds);
// to_json() is pure, so the document is unit-tested without processes.
class JobSummary {
 public:
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = 0;
    ExitStatus status;
    double ended_at = 0;
    std::string error_file;  // empty when the worker wrote none
    std::string message;     // from its error file
    std::string stdout_log;  // its log files, empty for a stream not sent to one
    std::string stderr_log;
    std::string teardown;  // what went wrong after its script was over; `status` the script's
  };
  struct Attempt {
    Topology topology;
    double started_at = 0;
    std::optional<double> ended_at;
    std::vector<Worker> workers;
    std::vector<ProcessFailure> failures;  // as the agent counted them (the summary's)
    std::optional<AttemptStartup> startup;
  };

  JobSummary(std::string host, std::string entrypoint, std::vector<std::string> args,
             double started_at);

  // What it keeps of an agent's event: a worker's exit, a hang found, the rendezvous' stop.
  void on(const AgentEvent& event);
  void attempt_started(const Topology& topology, double now);
  // Where the running attempt's start-up stands (replaces what was recorded).
  void startup(const AttemptStartup& startup);
  void worker_exited(int local_rank, pid_t pid, ExitStatus status, double now,
                     const std::string& error_file, const std::string& message,
                     const std::string& stdout_log = {}, const std::string& stderr_log = {},
                     const std::string& teardown = {});
  // The attempt is over (its workers and what they left are gone); `failures` are those the
  // agent counted.
  void attempt_ended(const std::vector<ProcessFailure>& failures, double now);
  // The job was stopped by the rendezvous (another node's failure, a lost node, ...).
  void stopped(const rendezvous::Stop& stop);
  // This node found the job hung (--hang-timeout): hang_report's JSON; the last one is kept.
  void hang(nlohmann::json hang) { hang_ = std::move(hang); }
  void set_run_id(const std::string& run_id) { run_id_ = run_id; }
  // Connections the job's store on this node refused for their address, in the whole job.
  void store_refused(std::size_t connections) { store_refused_ = connections; }
  // The run's log directory; empty when none is left (nothing was written there).
  void set_log_dir(const std::string& log_dir) { log_dir_ = log_dir; }
  // The job ended with `exit_code`; `error` is why when trainrun itself could not go on.
  void finished(int exit_code, double now, const std::string& error = {});

  // The JSON document (schema "trainrun.job-summary/1", see docs/cli.md).
  std::string to_json() const;

 private:
  std::string host_;
  std::string entrypoint_;
  std::vector<std::string> args_;
  std::string run_id_;
  std::string log_dir_;
  double started_at_ = 0;
  std::optional<double> ended_at_;
  std::optional<int> exit_code_;
  std::string error_;
  std::optional<rendezvous::Stop> stop_;
  std::vector<Attempt> attempts_;
  nlohmann::json hang_;  // null: no hang found
  std::size_t store_refused_ = 0;
};

// --summary-file: records that the job ended with `exit_code` (`error`: why trainrun could not go
// on) and writes the document to `path` whole; nothing when `path` is empty. A failure to write
// it is said on the console, not fatal.
void write_summary_file(const std::string& path, JobSummary& summary, int exit_code,
                        const std::string& error = {});

}  // namespace trainrun::launch
