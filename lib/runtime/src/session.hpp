#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <trainrun/runtime/config.hpp>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/run_storage.hpp>

namespace trainrun::runtime::detail {

struct SessionOptions {
  bool use_gpu = false;
  RunConfig run;
  TorchConfig torch;
};

// The state of one training run in this process: its context, its process group (held in
// process_group.cpp) and, on rank 0, its storage.
class Session {
 public:
  Session(SessionOptions options, const LaunchEnv& launch, const std::string& experiment_name,
          std::filesystem::path run_dir);

  const TrainContext& context() const { return context_; }
  const SessionOptions& options() const { return options_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  // Rank 0's writer for the run directory, opened on first use.
  RunStorage& storage();
  std::optional<Checkpoint> latest_checkpoint();
  // Takes rank 0's run directory (and experiment name), so that every rank of the fit() call
  // numbered `serial` uses one even where their launchers' variables differ (each node's log
  // directory, say).
  void adopt_rank0_run_dir(int serial);
  // From now on rank 0 decides get_checkpoint() for every rank: it publishes its latest
  // checkpoint now and after each report (publish_checkpoint), the others read it.
  void start_sharing_checkpoints();
  void publish_checkpoint();
  // Counts a report() on every rank, so that all read the same generation of rank 0's choice.
  void count_report() { ++reports_; }
  long reports() const { return reports_; }

 private:
  SessionOptions options_;
  TrainContext context_;
  std::filesystem::path run_dir_;
  std::unique_ptr<RunStorage> storage_;
  int serial_ = 0;  // which session of this job, for keys in the store
  long reports_ = 0;
  bool sharing_checkpoints_ = false;
};

// The running session; one with default options is started on first use when there is none.
Session& current_session();
// Starts a session with these options (taking over one started implicitly); throws when the
// environment is invalid or a session with other GPU settings is running.
Session& begin_session(const SessionOptions& options);
// Tears the session and its process group down; a no-op when none is running.
void end_session();
bool session_active();

// Defined in process_group.cpp (the only place that knows c10d).
// Checks that use_gpu can be honoured and selects this worker's GPU; throws ConfigError if not.
void prepare_device(const TrainContext& context);
void start_process_group(const TrainContext& context, std::chrono::milliseconds timeout);
void stop_process_group();
bool process_group_started();
void barrier();
// Rank 0's `value` under `key` on every rank: rank 0 stores it in the job's store and returns
// it, the others wait for it. Without a process group, `value` itself.
std::string share_from_rank0(int rank, const std::string& key, const std::string& value);
void clear_gradient_synchronizers();

// The running executable's file name, for default experiment names.
std::string program_name();
// The time of this worker's first report(), left in its launcher's log directory for trainrun's
// start-up record; nothing without a launcher's error file.
void record_first_report();

}  // namespace trainrun::runtime::detail
