// A training program for the runtime's multi-process tests. Each mode exercises one part of the
// runtime and writes what it saw, so the test process can compare ranks and runs.
//   collectives                      all-reduce rank+1 through get_process_group()
//   mlp OUT_DIR STEPS [VARIANT]      SGD on a small MLP, this rank's shard of a fixed batch
//   shards OUT_DIR EPOCHS SIZE       the indices prepare_data_loader gives this rank per epoch
//   train EPOCHS NUM_WORKERS [CRASH_EPOCH MARKER]   TorchTrainer with report/get_checkpoint
//   fail                             TorchTrainer whose train_func throws
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <trainrun/runtime/runtime.hpp>

namespace rt = trainrun::runtime;
namespace fs = std::filesystem;

namespace {

int collectives() {
  const auto& context = rt::get_context();
  auto group = rt::get_process_group();
  if (!group) {
    std::printf("rank %d: no process group (local mode)\n", context.world_rank());
    return context.launched() ? 3 : 0;
  }
  std::vector<torch::Tensor> tensors = {torch::full({3}, context.world_rank() + 1.0)};
  group->allreduce(tensors)->wait();
  const double world = context.world_size();
  const double expected = world * (world + 1) / 2;
  const bool ok = torch::allclose(tensors[0], torch::full({3}, expected));
  std::printf("rank %d/%d local %d/%d node %d: sum=%g expected=%g %s\n", context.world_rank(),
              context.world_size(), context.local_rank(), context.local_world_size(),
              context.node_rank(), tensors[0][0].item<double>(), expected, ok ? "ok" : "WRONG");
  return ok ? 0 : 3;
}

// The "wide" model: one layer too big to share a bucket, and one layer forward never uses.
struct WideNet : torch::nn::Module {
  WideNet()
      : in(register_module("in", torch::nn::Linear(4, 600))),
        hidden(register_module("hidden", torch::nn::Linear(600, 600))),
        unused(register_module("unused", torch::nn::Linear(3, 3))),
        out(register_module("out", torch::nn::Linear(600, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return out(torch::tanh(hidden(torch::tanh(in(x)))));
  }
  torch::nn::Linear in, hidden, unused, out;
};

// Prints whether `grad` differs between ranks (it does not once gradients are averaged).
void report_gradient_spread(const torch::Tensor& grad) {
  auto group = rt::get_process_group();
  if (!group) return;
  std::vector<torch::Tensor> high = {grad.detach().clone()};
  std::vector<torch::Tensor> low = {-grad.detach()};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  group->allreduce(high, max)->wait();
  group->allreduce(low, max)->wait();
  const double spread = (high[0] + low[0]).abs().max().item<double>();
  std::printf("gradients after a no_sync pass %s across ranks\n",
              spread > 0 ? "differ" : "are equal");
}

// variant: "plain" (one backward per step), "accumulate" (two half-batch backward passes per
// step), "no_sync" (the same, the first pass under NoSync) or "wide" (WideNet, several buckets
// and an unused parameter).
int mlp(const fs::path& out_dir, int steps, const std::string& variant) {
  const auto& context = rt::get_context();
  // Each rank starts from different weights: prepare_model must replace them by rank 0's.
  torch::manual_seed(100 + static_cast<std::uint64_t>(context.world_rank()));
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::shared_ptr<torch::nn::Module> module;
  // The wide model trains in double precision: its 600-wide sums would differ between a full
  // batch and a shard by float rounding alone.
  const auto dtype = variant == "wide" ? torch::kDouble : torch::kFloat;
  if (variant == "wide") {
    auto net = std::make_shared<WideNet>();
    net->to(dtype);
    rt::prepare_model(net);
    forward = [net](const torch::Tensor& x) { return net->forward(x); };
    module = net;
  } else {
    auto net = rt::prepare_model(torch::nn::Sequential(
        torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 3), torch::nn::Tanh(),
        torch::nn::Linear(3, 1)));
    forward = [net](const torch::Tensor& x) mutable { return net->forward(x); };
    module = net.ptr();
  }
  torch::manual_seed(7);
  const auto inputs = torch::randn({16, 4}).to(dtype);
  const auto targets = torch::randn({16, 1}).to(dtype);
  const int64_t per_rank = 16 / context.world_size();
  const auto x = inputs.narrow(0, context.world_rank() * per_rank, per_rank);
  const auto y = targets.narrow(0, context.world_rank() * per_rank, per_rank);
  torch::optim::SGD optimizer(module->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    if (variant == "accumulate" || variant == "no_sync") {
      // Gradient accumulation: the mean of two half-batch losses, one backward pass each; with
      // no_sync, the first pass keeps its gradients local and the second averages both.
      const int64_t half = per_rank / 2;
      auto half_backward = [&](int64_t start) {
        auto loss = torch::mse_loss(forward(x.narrow(0, start, half)), y.narrow(0, start, half));
        (loss / 2).backward();
      };
      if (variant == "no_sync") {
        {
          rt::NoSync no_sync(module);
          half_backward(0);
        }
        if (step == 0) report_gradient_spread(module->parameters().front().grad());
      } else {
        half_backward(0);
      }
      half_backward(half);
    } else {
      torch::mse_loss(forward(x), y).backward();
    }
    optimizer.step();
  }
  std::ofstream out(out_dir / ("params_rank" + std::to_string(context.world_rank()) + ".txt"));
  char text[64];
  for (const auto& param : module->parameters()) {
    const auto flat = param.detach().to(torch::kDouble).reshape({-1});
    const auto values = flat.accessor<double, 1>();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      std::snprintf(text, sizeof(text), "%.9g\n", values[i]);
      out << text;
    }
  }
  return out ? 0 : 3;
}

// Example i holds the number i.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(std::size_t size) : size_(size) {}
  torch::data::Example<> get(std::size_t index) override {
    return {torch::tensor(static_cast<int64_t>(index)), torch::tensor(0)};
  }
  torch::optional<std::size_t> size() const override { return size_; }
  std::size_t size_;
};

int shards(const fs::path& out_dir, int epochs, std::size_t size) {
  const auto& context = rt::get_context();
  auto loader = rt::prepare_data_loader(IndexDataset(size).map(torch::data::transforms::Stack<>()),
                                        rt::DataLoaderOptions{/*batch_size=*/4, /*shuffle=*/true});
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(static_cast<std::size_t>(epoch));
    std::ofstream out(out_dir / ("shard_r" + std::to_string(context.world_rank()) + "_e" +
                                 std::to_string(epoch) + ".txt"));
    for (auto& batch : loader) {
      for (int64_t i = 0; i < batch.data.size(0); ++i) out << batch.data[i].item<int64_t>() << "\n";
    }
  }
  return 0;
}

int train(int epochs, int num_workers, int crash_epoch, const std::string& marker) {
  auto train_func = [&] {
    const auto& context = rt::get_context();
    int start = 0;
    if (auto checkpoint = rt::get_checkpoint()) {
      std::ifstream in(checkpoint->path() / "epoch.txt");
      in >> start;
      ++start;
      std::printf("rank %d: resuming at epoch %d from %s\n", context.world_rank(), start,
                  checkpoint->path().filename().c_str());
    }
    for (int epoch = start; epoch < epochs; ++epoch) {
      if (epoch == crash_epoch && context.world_rank() == context.world_size() - 1 &&
          !marker.empty() && !fs::exists(marker)) {
        std::ofstream(marker) << "crashed\n";
        std::printf("rank %d: crashing at epoch %d\n", context.world_rank(), epoch);
        std::fflush(stdout);
        std::_Exit(7);
      }
      const fs::path dir =
          fs::temp_directory_path() /
          ("trainrun_rt_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(epoch));
      fs::create_directories(dir);
      std::ofstream(dir / "epoch.txt") << epoch << "\n";
      rt::report({{"epoch", epoch}, {"loss", 1.0 / (epoch + 1)}, {"rank", context.world_rank()}},
                 rt::Checkpoint::from_directory(dir));
      fs::remove_all(dir);
    }
  };
  rt::CheckpointConfig checkpoints;
  checkpoints.num_to_keep = 2;
  rt::RunConfig run_config;
  run_config.checkpoint_config = checkpoints;
  const char* max_failures = std::getenv("TRAINRUN_TEST_MAX_FAILURES");
  run_config.failure_config.max_failures = max_failures ? std::atoi(max_failures) : 1;
  rt::TorchTrainer trainer(train_func, rt::ScalingConfig{num_workers, false}, run_config);
  const rt::Result result = trainer.fit();
  std::printf("result: ok=%d epoch=%s checkpoint=%s path=%s\n", result.ok() ? 1 : 0,
              result.metrics.is_object() && result.metrics.contains("epoch")
                  ? result.metrics["epoch"].dump().c_str()
                  : "none",
              result.checkpoint ? result.checkpoint->path().filename().c_str() : "none",
              result.path.c_str());
  if (!result.ok()) std::printf("error: %s\n", result.error->c_str());
  return result.ok() ? 0 : 4;
}

int fail() {
  rt::TorchTrainer trainer([] { throw std::runtime_error("boom in train_func"); },
                           rt::ScalingConfig{});
  const rt::Result result = trainer.fit();
  std::printf("result error: %s\n", result.error ? result.error->c_str() : "none");
  return result.ok() ? 0 : 4;
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "collectives") return collectives();
  if (mode == "mlp" && (argc == 4 || argc == 5)) {
    return mlp(argv[2], std::stoi(argv[3]), argc == 5 ? argv[4] : "plain");
  }
  if (mode == "shards" && argc == 5) {
    return shards(argv[2], std::stoi(argv[3]), static_cast<std::size_t>(std::stoul(argv[4])));
  }
  if (mode == "train" && (argc == 4 || argc == 6)) {
    return train(std::stoi(argv[2]), std::stoi(argv[3]), argc == 6 ? std::stoi(argv[4]) : -1,
                 argc == 6 ? argv[5] : "");
  }
  if (mode == "fail") return fail();
  std::fprintf(stderr, "runtime_test_worker: unknown mode or wrong arguments (see the source)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "runtime_test_worker: %s\n", e.what());
    return 5;
  }
}
