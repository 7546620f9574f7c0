// FashionMNIST on a ResNet-18, written once against libtrainrun_runtime and run in every mode:
//   ./fashion_mnist                                         one process (local mode)
//   trainrun --standalone --nproc-per-node=2 ./fashion_mnist  two workers under trainrun
//   torchrun --standalone --nproc_per_node=2 --no_python ./fashion_mnist
//   ./fashion_mnist --num-workers 2                         the trainer starts two workers
#include <cstdio>
#include <exception>
#include <string>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/trainer.hpp>
#include <vector>

#include "dataset_files.hpp"
#include "options.hpp"
#include "train.hpp"

namespace rt = trainrun::runtime;
namespace fm = fashion_mnist;

namespace {

fm::Data load_data(const fm::Options& options) {
  fm::Data data;
  data.train = fm::load_split(options.data_dir, fm::SplitKind::train, options.subset);
  data.test = fm::load_split(options.data_dir, fm::SplitKind::test, options.test_subset);
  return data;
}

int run(const fm::Options& options) {
  const rt::LaunchEnv launch = rt::parse_launch_env(rt::current_environment());
  const bool starts_workers = options.num_workers > 0 && !launch.launched;

  // Read (and check) the data before anything starts, so a bad file is one clear line. A parent
  // that only starts workers checks the files and lets each worker load its own copy.
  fm::Data data = load_data(options);
  if (starts_workers) data = fm::Data{};

  rt::RunConfig run_config;
  run_config.name = options.name;
  run_config.storage_path = options.storage_path;
  run_config.checkpoint_config.num_to_keep = 1;
  run_config.failure_config.max_failures = options.max_failures;
  rt::ScalingConfig scaling_config;
  scaling_config.num_workers = options.num_workers;
  scaling_config.use_gpu = options.use_gpu;

  rt::TorchTrainer trainer([&] { fm::train(options, data); }, scaling_config, run_config);
  const rt::Result result = trainer.fit();
  if (!result.ok()) {
    std::fprintf(stderr, "fashion_mnist: training failed: %s\n", result.error->c_str());
    return 1;
  }
  if (starts_workers) {
    std::printf("%d workers finished: %s; results in %s\n", options.num_workers,
                result.metrics.dump().c_str(), result.path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto parsed = fm::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (parsed.help_text) {
      std::fputs(parsed.help_text->c_str(), stdout);
      return 0;
    }
    return run(parsed.options);
  } catch (const fm::UsageError& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  } catch (const rt::ConfigError& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // fm::DataError among them
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
}
