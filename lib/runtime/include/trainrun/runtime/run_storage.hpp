#pragma once

#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <trainrun/runtime/checkpoint.hpp>
#include <trainrun/runtime/config.hpp>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/report.hpp>
#include <utility>
#include <vector>

namespace trainrun::runtime {

// One experiment's directory: metrics.jsonl (one JSON object a line) and checkpoint_NNNNNN/.
// Checkpoints are copied into a hidden temporary directory, fsynced, and renamed into place, so
// a crash mid-save leaves the earlier checkpoints intact and no partial checkpoint_* directory.
class RunStorage {
 public:
  // Creates the directory when missing, removes temporaries left by a crashed save, and reads
  // back the checkpoints and metrics already there (a restarted job continues their numbering).
  // Refuses (ConfigError) a directory another live process has open as its run directory.
  RunStorage(std::filesystem::path run_dir, CheckpointConfig config);
  ~RunStorage();
  RunStorage(const RunStorage&) = delete;
  RunStorage& operator=(const RunStorage&) = delete;

  // Persists `checkpoint` (when given), then appends `metrics` with training_iteration,
  // timestamp and checkpoint_dir_name added, then drops checkpoints beyond num_to_keep.
  // Returns the persisted checkpoint.
  std::optional<Checkpoint> record(const Metrics& metrics,
                                   const std::optional<Checkpoint>& checkpoint);

  std::optional<Checkpoint> latest_checkpoint() const;
  // The metrics line last appended (null when none).
  const Metrics& last_metrics() const { return last_metrics_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  // Kept checkpoints, oldest first.
  std::vector<Checkpoint> checkpoints() const;

  static constexpr const char* metrics_file_name = "metrics.jsonl";
  // Each persisted checkpoint also holds its own metrics line under this name.
  static constexpr const char* checkpoint_metrics_file_name = ".trainrun_metrics.json";

 private:
  void append_metrics_line(const Metrics& line);
  struct Entry {
    int index;
    std::filesystem::path path;
    std::optional<double> score;
  };
  void prune();
  std::optional<double> score_of(const Metrics& metrics) const;

  std::filesystem::path run_dir_;
  CheckpointConfig config_;
  std::vector<Entry> entries_;  // oldest first
  Metrics last_metrics_;
  long long iterations_ = 0;
  int next_index_ = 0;
  int lock_fd_ = -1;  // holds the run directory's lock while open
};

// The newest complete checkpoint_NNNNNN directory in `run_dir`, without taking ownership of it.
std::optional<Checkpoint> find_latest_checkpoint(const std::filesystem::path& run_dir);

// The last line of <run_dir>/metrics.jsonl (null when none).
Metrics read_last_metrics(const std::filesystem::path& run_dir);

// Every line of <run_dir>/metrics.jsonl, oldest first.
std::vector<Metrics> read_metrics_history(const std::filesystem::path& run_dir);

// The checkpoints in `run_dir` with the metrics reported with them, best first: by
// `config`'s score attribute (those without a finite score last), newest first on ties or
// without one.
std::vector<std::pair<Checkpoint, Metrics>> read_best_checkpoints(
    const std::filesystem::path& run_dir, const CheckpointConfig& config);

// <storage>/<name> for a run. Pure: the environment, program name and clock come in.
//  name: RunConfig::name, else TRAINRUN_EXPERIMENT_NAME, else in a launched job
//  "<program>_<TORCHELASTIC_RUN_ID>"; when the run id is missing or "none", with a dynamic
//  rendezvous "<program>_<the launcher's log directory>" (from TORCHELASTIC_ERROR_FILE, the same
//  on every restart), with a static one "<program>_<MASTER_ADDR>_<MASTER_PORT>"; in local mode
//  "<program>_<YYYY-MM-DD_HH-MM-SS>_<pid>" (without "_<pid>" when pid is 0).
//  storage: RunConfig::storage_path, else TRAINRUN_STORAGE_PATH, else $HOME/trainrun_results.
std::string resolve_experiment_name(const RunConfig& config, const LaunchEnv& launch,
                                    const std::map<std::string, std::string>& env,
                                    const std::string& program, std::time_t now, long pid = 0);
std::filesystem::path resolve_storage_path(const RunConfig& config,
                                           const std::map<std::string, std::string>& env);

}  // namespace trainrun::runtime
