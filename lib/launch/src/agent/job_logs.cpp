#include "job_logs.hpp"

#include <fmt/format.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/launch/workers/flight_recorder.hpp"

namespace trainrun::launch {

namespace {

bool directory_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

void JobLogs::create(const std::string& run_id) { dir_ = LogDir::create(config_.log_dir, run_id); }

std::string JobLogs::attempt_path(int attempt, const std::string& name) const {
  return fmt::format("{}/attempt_{}/{}", dir_.run_dir(), attempt, name);
}

std::vector<std::string> JobLogs::after_summary(int last_attempt) const {
  std::vector<std::string> lines;
  drop_agent_files(last_attempt);
  dir_.remove_if_empty();
  if (directory_exists(dir_.run_dir())) lines.push_back("log directory: " + dir_.run_dir());
  const std::string dumps = flight_recorder_line(flight_recorder_dumps(dir_.run_dir()));
  if (!dumps.empty()) lines.push_back(dumps);
  return lines;
}

std::string JobLogs::end(int exit_code, int last_attempt, bool consoles_open,
                         const std::vector<std::string>& unasked_stacks) {
  if (exit_code == 0 && consoles_open) drop_console_copies(last_attempt);
  if (exit_code == 0) drop_unasked_stacks(unasked_stacks);
  drop_agent_files(last_attempt);
  dir_.remove_if_empty();
  const bool kept = directory_exists(dir_.run_dir());
  if (kept && exit_code == 0 && dir_.temporary())
    kept_line_ = fmt::format(
        "log directory kept: {} (it holds what the console did not show; --log-dir chooses "
        "where)",
        dir_.run_dir());
  return kept ? dir_.run_dir() : "";
}

// A job that succeeded without --log-dir keeps no copy of what the console showed (--tee), so
// that each run does not leave a directory behind; what only the files hold stays. When the
// console went away, the files hold what it did not show.
void JobLogs::drop_console_copies(int last_attempt) const {
  if (!dir_.temporary()) return;
  for (int attempt = 0; attempt <= last_attempt; ++attempt) {
    for (int lr = 0; lr < config_.nproc_per_node.number; ++lr) {
      const OutputPlan plan = plan_output(config_, lr, dir_.rank_dir(attempt, lr));
      for (const StreamPlan* stream : {&plan.out, &plan.err}) {
        if (stream->route != StreamRoute::tee) continue;
        ::unlink(stream->file.c_str());
        if (!stream->duplicate_file.empty()) ::unlink(stream->duplicate_file.c_str());
      }
    }
  }
}

// The stacks the hang watch took to judge a quiet stretch that turned out to be work (or that
// another node asked for): a job that then succeeded was not hung, and they are nobody's to read.
// Only what lies in this run's own stacks/ directory; under --log-dir nothing is removed.
void JobLogs::drop_unasked_stacks(const std::vector<std::string>& dumps) const {
  if (!dir_.temporary()) return;
  const std::string own = dir_.run_dir() + "/stacks/";
  for (const std::string& dump : dumps) {
    if (dump.rfind(own, 0) != 0 || dump.find("/..") != std::string::npos) continue;
    std::error_code ignored;
    std::filesystem::remove_all(dump, ignored);
  }
}

// They served the running job; a temporary directory that held nothing else is then empty and
// goes. Under --log-dir nothing is removed.
void JobLogs::drop_agent_files(int last_attempt) const {
  if (!dir_.temporary()) return;
  ::unlink(heartbeat_path().c_str());
  for (int attempt = 0; attempt <= last_attempt; ++attempt)
    for (int lr = 0; lr < config_.nproc_per_node.number; ++lr)
      ::unlink(first_report_path(attempt, lr).c_str());
}

}  // namespace trainrun::launch
