#include "options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "dataset_files.hpp"

namespace fashion_mnist {

ParsedCommandLine parse_command_line(const std::vector<std::string>& args) {
  ParsedCommandLine parsed;
  Options& o = parsed.options;
  o.data_dir = default_data_dir;

  CLI::App app(
      "Trains a ResNet-18 on FashionMNIST with libtrainrun_runtime. Runs alone, as the workers "
      "of trainrun or torchrun, or starts its own workers with --num-workers.",
      "fashion_mnist");
  app.option_defaults()->always_capture_default();
  app.add_option("--epochs", o.epochs, "Epochs to train")->check(CLI::Range(1, 100000));
  app.add_option("--batch-size", o.batch_size, "Images per batch and worker")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--lr", o.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  std::size_t subset = 0, test_subset = 0, max_steps = 0;
  app.add_option("--subset", subset, "Train on the first N training images (smoke runs)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{60000}));
  app.add_option("--test-subset", test_subset, "Evaluate on the first N test images")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000}));
  app.add_option("--max-steps", max_steps, "Stop each epoch after N steps per worker")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  app.add_option("--num-workers", o.num_workers,
                 "Start N worker processes of this program (outside a launcher)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-failures", o.max_failures,
                 "With --num-workers: restart the workers up to N times after a failure "
                 "(-1: without limit)")
      ->check(CLI::Range(-1, 1000000));
  std::string data_dir = o.data_dir.string();
  app.add_option("--data-dir", data_dir,
                 "Directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  int crash_epoch = 0;
  app.add_option("--crash-once-at-epoch", crash_epoch,
                 "Rank 1 (rank 0 when alone) exits with status 3 at the start of epoch K, once "
                 "per experiment (a file in the run directory marks it), to exercise resuming")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--use-gpu", o.use_gpu,
               "Train on one GPU per worker (cuda:LOCAL_RANK) with NCCL; needs a CUDA LibTorch");
  app.add_option("--threads", o.threads, "Intra-op threads per worker (0: LibTorch's default)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--seed", o.seed, "Seed for the model's initial weights and the data order");
  app.add_option("--log-every", o.log_every, "Print the loss every N steps (0: per epoch only)");
  app.add_option("--name", o.name, "Experiment name (default: chosen by the runtime)");
  std::string storage_path;
  app.add_option("--storage-path", storage_path,
                 "Where runs are kept (default: $TRAINRUN_STORAGE_PATH, else ~/trainrun_results)");

  std::string init_model;
  app.add_option(
      "--init-model", init_model,
      "Start from this state dict (a model.pt of ours, or torch.save(model.state_dict()) "
      "of the Python script's ResNet-18) instead of random weights");

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    parsed.help_text = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
  if (app.count("--subset")) o.subset = subset;
  if (app.count("--test-subset")) o.test_subset = test_subset;
  if (app.count("--max-steps")) o.max_steps = max_steps;
  if (app.count("--crash-once-at-epoch")) {
    if (crash_epoch > o.epochs) {
      throw UsageError("--crash-once-at-epoch=" + std::to_string(crash_epoch) +
                       " is after the last epoch (--epochs=" + std::to_string(o.epochs) + ")");
    }
    o.crash_once_at_epoch = crash_epoch;
  }
  if (app.count("--max-failures") && o.num_workers == 0) {
    throw UsageError(
        "--max-failures applies to the workers started with --num-workers; under a launcher use "
        "its restarts (trainrun --max-restarts)");
  }
  if (data_dir.empty()) throw UsageError("--data-dir must not be empty");
  o.data_dir = data_dir;
  o.storage_path = storage_path;
  o.init_model = init_model;
  return parsed;
}

}  // namespace fashion_mnist
