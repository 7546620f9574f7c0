#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <trainrun/runtime/checkpoint.hpp>
#include <trainrun/runtime/config.hpp>
#include <trainrun/runtime/report.hpp>
#include <utility>
#include <vector>

namespace trainrun::runtime {

// What fit() returns, as Ray Train's Result: read from the run directory once training ended
// (or failed), so it is the same in local mode, in a launched worker and in the parent of
// num_workers.
struct Result {
  Metrics metrics;  // the last reported metrics (null when nothing was reported)
  std::optional<Checkpoint> checkpoint;  // the latest persisted checkpoint
  // Every reported metrics line, oldest first (Ray's metrics_dataframe, one row a line).
  std::vector<Metrics> metrics_history;
  // The kept checkpoints with their metrics, best first by
  // CheckpointConfig::checkpoint_score_attribute (newest first without one), as Ray's
  // best_checkpoints.
  std::vector<std::pair<Checkpoint, Metrics>> best_checkpoints;
  std::filesystem::path path;        // <storage_path>/<name>
  std::optional<std::string> error;  // set when training failed
  bool ok() const { return !error; }
};

// Runs a training function in every mode without a change to it:
//  - num_workers = 0: in this process, as one worker of a trainrun/torchrun job when launched,
//    otherwise alone (local mode). An exception from train_func writes the torchelastic error
//    file ($TORCHELASTIC_ERROR_FILE) and becomes Result::error in local mode; in a launched worker
//    it ends the process with status 1, so the launcher sees the failure and can restart.
//  - num_workers = N > 0 outside a launcher: starts N copies of this executable (same arguments)
//    as one job and returns their Result.
class TorchTrainer {
 public:
  TorchTrainer(std::function<void()> train_func, ScalingConfig scaling_config,
               RunConfig run_config = {}, TorchConfig torch_config = {});

  Result fit();

 private:
  Result fit_in_process();
  Result fit_with_workers();

  std::function<void()> train_func_;
  ScalingConfig scaling_config_;
  RunConfig run_config_;
  TorchConfig torch_config_;
};

}  // namespace trainrun::runtime
