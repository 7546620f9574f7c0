#pragma once

#include <string>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/output/log_dir.hpp"

namespace trainrun::launch {

// Files of the run's tree that are for the agent alone, read while the job runs: the C++
// runtime's mark of a rank's first report() (beside its error file), and the heartbeat file of
// --hang-timeout (in the run directory).
inline constexpr const char* kFirstReportFile = "first_report";
inline constexpr const char* kHeartbeatFile = "heartbeat";

// The job's log directory as the agent keeps it: made at the start; when the job ends, the
// agent's own files and what the console showed dropped after a success, an empty one removed,
// a temporary one that stays said at exit; named, with NCCL's flight recorder dumps, after a
// failure summary. A temporary one stays only for what the user must see: a log the console did
// not show, an error file, stacks, a dump.
class JobLogs {
 public:
  explicit JobLogs(const LaunchConfig& config) : config_(config) {}

  // Makes the run's directory for `run_id`. Throws SetupError naming it when it cannot.
  void create(const std::string& run_id);
  const LogDir& dir() const { return dir_; }
  // `name` in attempt `attempt`'s directory of the run (a hang report, the file timer's dumps).
  std::string attempt_path(int attempt, const std::string& name) const;
  std::string heartbeat_path() const { return dir_.run_dir() + "/" + kHeartbeatFile; }
  std::string first_report_path(int attempt, int local_rank) const {
    return dir_.rank_dir(attempt, local_rank) + "/" + kFirstReportFile;
  }

  // After a failure summary: where the logs are, when the directory holds files, and NCCL's
  // flight recorder dumps, when there are any. The job is over (its attempts up to
  // `last_attempt`): the agent's own files of a temporary directory and an empty directory go now.
  std::vector<std::string> after_summary(int last_attempt) const;

  // The job has ended with `exit_code`, its last attempt `last_attempt`; `consoles_open`: both
  // consoles took output to the end; `unasked_stacks`: stack dumps no person asked for (those the
  // hang watch took of a quiet job that went on). Returns the directory that stays, "" when none
  // does.
  std::string end(int exit_code, int last_attempt, bool consoles_open,
                  const std::vector<std::string>& unasked_stacks = {});
  // Said at exit: why a temporary log directory stays; empty when none does, or need not be said.
  const std::string& kept_line() const { return kept_line_; }

 private:
  void drop_console_copies(int last_attempt) const;
  void drop_agent_files(int last_attempt) const;
  void drop_unasked_stacks(const std::vector<std::string>& dumps) const;

  const LaunchConfig& config_;
  LogDir dir_;
  std::string kept_line_;
};

}  // namespace trainrun::launch
