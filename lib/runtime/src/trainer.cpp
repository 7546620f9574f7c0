#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <trainrun/runtime/error_file.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/run_storage.hpp>
#include <trainrun/runtime/trainer.hpp>
#include <utility>

#include "launch_workers.hpp"
#include "session.hpp"

namespace trainrun::runtime {

TorchTrainer::TorchTrainer(std::function<void()> train_func, ScalingConfig scaling_config,
                           RunConfig run_config, TorchConfig torch_config)
    : train_func_(std::move(train_func)),
      scaling_config_(scaling_config),
      run_config_(std::move(run_config)),
      torch_config_(torch_config) {
  if (!train_func_) {
    throw ConfigError("TorchTrainer: train_func is empty; pass the function that trains");
  }
  if (scaling_config_.num_workers < 0) {
    throw ConfigError("ScalingConfig::num_workers must be >= 0 (got " +
                      std::to_string(scaling_config_.num_workers) +
                      "); 0 runs in this process, N starts N workers");
  }
  if (run_config_.failure_config.max_failures < -1) {
    throw ConfigError("FailureConfig::max_failures must be >= -1 (got " +
                      std::to_string(run_config_.failure_config.max_failures) +
                      "); -1 restarts without limit");
  }
  if (torch_config_.timeout.count() <= 0) {
    throw ConfigError("TorchConfig::timeout must be positive");
  }
}

namespace {

// Fills what the run directory holds: the metrics and checkpoints reported so far.
void read_run(Result& result, const CheckpointConfig& config) {
  if (result.path.empty()) return;
  result.checkpoint = find_latest_checkpoint(result.path);
  result.metrics_history = read_metrics_history(result.path);
  result.metrics = result.metrics_history.empty() ? Metrics() : result.metrics_history.back();
  result.best_checkpoints = read_best_checkpoints(result.path, config);
}

}  // namespace

Result TorchTrainer::fit() {
  bool launched = false;
  try {
    launched = parse_launch_env(current_environment()).launched;
  } catch (const ConfigError&) {
    // A bad environment (RANK >= WORLD_SIZE, ...) is reported below like any other failure:
    // error file and Result::error.
    return fit_in_process();
  }
  if (scaling_config_.num_workers > 0 && !launched) return fit_with_workers();
  return fit_in_process();
}

Result TorchTrainer::fit_in_process() {
  Result result;
  bool launched = false;
  int rank = 0;
  std::string error_file;
  try {
    // Read before anything can fail, so even a bad environment reaches the error file.
    const LaunchEnv launch = parse_launch_env(current_environment());
    launched = launch.launched;
    rank = launch.world_rank;
    error_file = launch.error_file;

    detail::SessionOptions options{scaling_config_.use_gpu, run_config_, torch_config_};
    auto& session = detail::begin_session(options);
    result.path = session.run_dir();
    train_func_();
    // Rank 0 hosts the store: nobody leaves while another rank may still need it.
    detail::barrier();
    read_run(result, run_config_.checkpoint_config);
    detail::end_session();
    return result;
  } catch (...) {
    const ExceptionReport report = describe_current_exception();
    if (error_file.empty()) {
      if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE")) error_file = path;
    }
    if (!error_file.empty()) {
      try {
        write_error_file(error_file, report.message, report.stack);
      } catch (const std::exception& e) {
        std::cerr << "trainrun runtime: " << e.what() << "\n";
      }
    }
    try {
      detail::end_session();
    } catch (...) {
      // Tearing down after a failure is best effort: the failure itself is what gets reported.
    }
    if (launched) {
      std::cerr << "trainrun runtime: rank " << rank << ": training failed: " << report.message
                << "\n";
      std::cerr.flush();
      std::fflush(stdout);
      std::exit(1);
    }
    result.error = report.message;
    read_run(result, run_config_.checkpoint_config);
    return result;
  }
}

Result TorchTrainer::fit_with_workers() {
  const auto env = current_environment();
  const LaunchEnv launch = parse_launch_env(env);
  const std::string name = resolve_experiment_name(run_config_, launch, env, detail::program_name(),
                                                   std::time(nullptr), ::getpid());
  const auto storage = resolve_storage_path(run_config_, env);

  Result result;
  result.path = storage / name;
  const int code = detail::launch_workers(scaling_config_.num_workers,
                                          run_config_.failure_config.max_failures, name, storage);
  if (code != 0) {
    result.error = "the " + std::to_string(scaling_config_.num_workers) +
                   "-worker job failed with exit code " + std::to_string(code) +
                   " (the launcher's failure summary above names the worker)";
  }
  read_run(result, run_config_.checkpoint_config);
  return result;
}

}  // namespace trainrun::runtime
