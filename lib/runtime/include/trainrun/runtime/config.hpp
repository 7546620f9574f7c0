#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <trainrun/runtime/checkpoint.hpp>

namespace trainrun::runtime {

struct ScalingConfig {
  // 0: run in this process (local mode, or as one worker when started by trainrun/torchrun).
  // N > 0 outside a launcher: fit() starts N worker processes of this program and waits for them.
  int num_workers = 0;
  // One GPU per worker (cuda:LOCAL_RANK, or cuda:0 when a worker sees one) and NCCL; needs a
  // CUDA build of LibTorch.
  bool use_gpu = false;
};

struct FailureConfig {
  // How many times the worker group is restarted after a worker fails (num_workers > 0);
  // -1 restarts without limit.
  int max_failures = 0;
};

struct RunConfig {
  // Experiment name; results go to <storage_path>/<name>. Empty: $TRAINRUN_EXPERIMENT_NAME, else
  // a name that stays the same across restarts of one launched job (see docs/runtime.md).
  std::string name;
  // Empty: $TRAINRUN_STORAGE_PATH, else ~/trainrun_results.
  std::filesystem::path storage_path;
  CheckpointConfig checkpoint_config;
  FailureConfig failure_config;
};

struct TorchConfig {
  // Deadline for connecting to the store and for each collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

}  // namespace trainrun::runtime
