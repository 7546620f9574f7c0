#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {

// A command line that cannot be run; the message says which option and why.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  int epochs = 2;
  std::size_t batch_size = 128;  // per worker
  double lr = 1e-3;
  std::optional<std::size_t> subset;       // first N training images
  std::optional<std::size_t> test_subset;  // first N test images
  std::optional<std::size_t> max_steps;    // per epoch and worker
  int num_workers = 0;   // > 0: start that many workers (ScalingConfig::num_workers)
  int max_failures = 0;  // restarts of the workers started with --num-workers
  std::filesystem::path data_dir;
  std::optional<int> crash_once_at_epoch;  // rank 1 (rank 0 alone) exits once, at that epoch
  bool use_gpu = false;  // one GPU per worker and NCCL (ScalingConfig::use_gpu)
  int threads = 0;                         // intra-op threads; 0 keeps LibTorch's default
  std::uint64_t seed = 0;
  std::size_t log_every = 0;  // print the loss every N steps (rank 0); 0: only per epoch
  std::string name;           // experiment name (RunConfig::name)
  std::filesystem::path storage_path;
  std::filesystem::path init_model;  // a state dict (torch.save's format) to start from
};

struct ParsedCommandLine {
  Options options;
  std::optional<std::string> help_text;  // set for --help
};

// Parses the arguments after the program name. Pure: throws UsageError for a bad command line.
ParsedCommandLine parse_command_line(const std::vector<std::string>& args);

}  // namespace fashion_mnist
