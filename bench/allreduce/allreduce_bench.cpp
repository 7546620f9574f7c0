// All-reduce bandwidth through libtrainrun_runtime's process group, as a training program would
// use it: get_context() starts the group from the launcher's variables, get_process_group() gives
// it. For each message size: warm-up all-reduces, then timed in-place SUM all-reduces of a float32
// tensor. Rank 0 prints one JSON line per size; bench/allreduce/allreduce_bench.py measures the
// same with torch.distributed and bench/allreduce_bandwidth.py runs both.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <vector>

namespace rt = trainrun::runtime;

namespace {

struct Options {
  std::int64_t min_bytes = 1024;
  std::int64_t max_bytes = std::int64_t{64} << 20;
  int factor = 4;
  int warmup = 5;
  int iters = 0;  // 0: iterations_for(bytes)
};

// About 256 MiB moved per size, at least 10 and at most 100 all-reduces. allreduce_bench.py uses
// the same rule, so both sides time the same number of calls.
int iterations_for(std::int64_t bytes) {
  return static_cast<int>(std::clamp<std::int64_t>((std::int64_t{1} << 28) / bytes, 10, 100));
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

void all_reduce(rt::ProcessGroup& group, at::Tensor& tensor,
                c10d::ReduceOp op = c10d::ReduceOp::SUM) {
  std::vector<at::Tensor> tensors = {tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group.allreduce(tensors, options)->wait();
}

// One size: returns false when the first all-reduce gives a wrong sum.
bool measure(rt::ProcessGroup& group, const rt::TrainContext& context, std::int64_t bytes,
             const Options& options) {
  const int world = context.world_size();
  const std::int64_t elements = bytes / static_cast<std::int64_t>(sizeof(float));
  const int iters = options.iters > 0 ? options.iters : iterations_for(bytes);

  at::Tensor tensor =
      at::full({elements}, static_cast<float>(context.world_rank() + 1), at::kFloat);
  group.barrier()->wait();
  all_reduce(group, tensor);
  const float expected = static_cast<float>(world * (world + 1) / 2);
  if (!tensor.eq(expected).all().item<bool>()) {
    std::cerr << "allreduce_bench: rank " << context.world_rank() << ": wrong sum for " << bytes
              << " bytes (expected " << expected << " everywhere)\n";
    return false;
  }
  // Zeros stay zeros, so repeated in-place sums never overflow; adding them costs the same.
  tensor.zero_();
  for (int i = 1; i < options.warmup; ++i) all_reduce(group, tensor);

  at::Tensor seconds = at::empty({iters}, at::kDouble);
  double* out = seconds.data_ptr<double>();
  group.barrier()->wait();
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    all_reduce(group, tensor);
    out[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // An all-reduce ends when its slowest rank is done: take each iteration's longest time.
  all_reduce(group, seconds, c10d::ReduceOp::MAX);

  if (context.world_rank() == 0) {
    const double time = median(std::vector<double>(out, out + iters));
    const double algbw = static_cast<double>(bytes) / time / 1e9;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    std::printf(
        "{\"impl\": \"trainrun_runtime\", \"world_size\": %d, \"bytes\": %lld, \"iters\": %d, "
        "\"warmup\": %d, \"median_s\": %.9g, \"algbw_gbps\": %.6g, \"busbw_gbps\": %.6g}\n",
        world, static_cast<long long>(bytes), iters, options.warmup, time, algbw, busbw);
    std::fflush(stdout);
  }
  return true;
}

int run(const Options& options) {
  const rt::TrainContext& context = rt::get_context();
  auto group = rt::get_process_group();
  if (!group) {
    std::cerr << "allreduce_bench: no process group (local mode); run it under a launcher, e.g. "
                 "trainrun --standalone --nproc-per-node=4 allreduce_bench\n";
    return 2;
  }
  bool ok = true;
  for (std::int64_t bytes = options.min_bytes; ok && bytes <= options.max_bytes;
       bytes *= options.factor) {
    ok = measure(*group, context, bytes, options);
  }
  group.reset();
  rt::shutdown();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"All-reduce bandwidth through libtrainrun_runtime's process group"};
  app.add_option("--min-bytes", options.min_bytes, "smallest message")
      ->check(CLI::Range(4, 1 << 30));
  app.add_option("--max-bytes", options.max_bytes, "largest message")
      ->check(CLI::Range(std::int64_t{4}, std::int64_t{1} << 34));
  app.add_option("--factor", options.factor, "each size is this times the previous")
      ->check(CLI::Range(2, 1024));
  app.add_option("--warmup", options.warmup,
                 "untimed all-reduces per size (the first checks the sum)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--iters", options.iters,
                 "timed all-reduces per size; 0: about 256 MiB per size, 10 to 100")
      ->check(CLI::Range(0, 1000000));
  CLI11_PARSE(app, argc, argv);
  if (options.min_bytes % 4 != 0) {
    std::cerr << "allreduce_bench: --min-bytes=" << options.min_bytes
              << ": must be a multiple of 4 (float32 elements)\n";
    return 2;
  }
  try {
    return run(options);
  } catch (const rt::ConfigError& e) {
    std::cerr << "allreduce_bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "allreduce_bench: all-reduce failed: " << e.what() << "\n";
    return 1;
  }
}
