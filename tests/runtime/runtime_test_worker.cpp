// A training program for the runtime's multi-process tests. Each mode exercises one part of the
// runtime and writes what it saw, so the test process can compare ranks and runs.
//   collectives                      all-reduce rank+1 through get_process_group()
//   mlp OUT_DIR STEPS [VARIANT]      SGD on a small MLP, this rank's shard of a fixed batch
//   shards OUT_DIR EPOCHS SIZE       the indices prepare_data_loader gives this rank per epoch
//   train EPOCHS NUM_WORKERS [CRASH_EPOCH MARKER]   TorchTrainer with report/get_checkpoint
//   agree RUN_DIR                    get_checkpoint() on every rank while rank 1's listing of
//                                    RUN_DIR holds a checkpoint rank 0 never saved
//   scores max|min|default [KEEP]    Result::best_checkpoints after checkpoints scored out of order
//   fail                             TorchTrainer whose train_func throws
//   unused adam|sgd                  unused, rank-0-only and frozen parameters under an optimizer
//   batchnorm 0|1                    BatchNorm statistics across ranks (broadcast_buffers)
//   convert                          to(kDouble) after prepare_model
//   stuck RANK SECONDS               all-reduce, RANK first sleeping SECONDS in stuck_here()
//   heartbeat SECONDS                report() every 2 s for SECONDS, printing nothing until the end
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <trainrun/runtime/runtime.hpp>

#include "index_dataset.hpp"

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

// Not inlined, and with work after the sleep: the frame stays on the stack while it sleeps, for
// trainrun --hang-timeout to name.
__attribute__((noinline)) int stuck_here(unsigned seconds) {
  unsigned left = seconds;
  while (left > 0) left = ::sleep(left);
  return static_cast<int>(left);
}

// Silent until the end: the other ranks wait in the all-reduce while `stuck_rank` sleeps.
int stuck(int stuck_rank, unsigned seconds) {
  const auto& context = rt::get_context();
  auto group = rt::get_process_group();
  if (!group) return 3;
  if (context.world_rank() == stuck_rank && stuck_here(seconds) != 0) return 3;
  std::vector<torch::Tensor> tensors = {torch::ones({1})};
  group->allreduce(tensors)->wait();
  std::printf("rank %d: not stuck after all\n", context.world_rank());
  return 0;
}

// Alive only by report(): no output until the end, the ranks asleep between reports.
int heartbeat(int seconds) {
  const auto& context = rt::get_context();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int step = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    rt::report({{"step", step++}});
  }
  std::printf("done rank %d after %d reports\n", context.world_rank(), step);
  return 0;
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

// An identity whose backward throws, as a user's autograd function can.
struct ThrowingBackward : torch::autograd::Function<ThrowingBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*context*/,
                               const torch::Tensor& x) {
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*context*/,
                                                 const torch::autograd::variable_list& /*grads*/) {
    throw std::runtime_error("a user's backward failed");
  }
};

// Saves the module and loads it back into itself (as resuming from a checkpoint would).
void reload(const std::shared_ptr<torch::nn::Module>& module, const fs::path& dir, int rank) {
  const std::string path = (dir / ("reload_" + std::to_string(rank) + ".pt")).string();
  torch::serialize::OutputArchive out;
  module->save(out);
  out.save_to(path);
  torch::serialize::InputArchive in;
  in.load_from(path);
  module->load(in);
}

// The largest difference of `tensor` between ranks (0 in local mode).
double spread_across_ranks(const torch::Tensor& tensor) {
  auto group = rt::get_process_group();
  if (!group) return 0;
  std::vector<torch::Tensor> high = {tensor.detach().to(torch::kDouble).clone()};
  std::vector<torch::Tensor> low = {-tensor.detach().to(torch::kDouble)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  group->allreduce(high, max)->wait();
  group->allreduce(low, max)->wait();
  return (high[0] + low[0]).abs().max().item<double>();
}

// Prints whether `grad` differs between ranks (it does not once gradients are averaged).
void report_gradient_spread(const torch::Tensor& grad) {
  if (!rt::get_process_group()) return;
  const double spread = spread_across_ranks(grad);
  std::printf("gradients after a local or no_sync pass %s across ranks\n",
              spread > 0 ? "differ" : "are equal");
}

// variant: "plain" (one backward per step), "accumulate" (two half-batch backward passes per
// step), "no_sync" (the same, the first pass under NoSync), "wide" (WideNet, several buckets
// and an unused parameter), "throw" (a backward that throws before each no_sync step),
// "prepare_twice", "load_after_prepare" or "batchnorm" (for the comparison with Python's DDP).
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
  } else if (variant == "batchnorm") {
    // Compared with Python's DDP only: BatchNorm's batch statistics differ per shard.
    auto net =
        rt::prepare_model(torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                                torch::nn::Tanh(), torch::nn::Linear(8, 1)));
    forward = [net](const torch::Tensor& x) mutable { return net->forward(x); };
    module = net.ptr();
  } else {
    auto net = rt::prepare_model(torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(),
                                                       torch::nn::Linear(8, 3), torch::nn::Tanh(),
                                                       torch::nn::Linear(3, 1)));
    if (variant == "prepare_twice") rt::prepare_model(net);
    if (variant == "load_after_prepare") reload(net.ptr(), out_dir, context.world_rank());
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
    if (variant == "throw") {
      // Every rank's backward throws after all gradients are in (and all-reduces started); the
      // next backward must average again, and NoSync must still work.
      try {
        auto input = x.clone().requires_grad_(true);
        torch::mse_loss(forward(ThrowingBackward::apply(input)), y).backward();
      } catch (const std::exception& e) {
        if (step == 0) std::printf("backward threw: %s\n", e.what());
      }
      optimizer.zero_grad();
    }
    if (variant == "accumulate" || variant == "no_sync" || variant == "throw") {
      // Gradient accumulation: the mean of two half-batch losses, one backward pass each; with
      // no_sync, the first pass keeps its gradients local and the second averages both.
      const int64_t half = per_rank / 2;
      auto half_backward = [&](int64_t start) {
        auto loss = torch::mse_loss(forward(x.narrow(0, start, half)), y.narrow(0, start, half));
        (loss / 2).backward();
      };
      if (variant == "no_sync" || variant == "throw") {
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
      if (step == 0 && variant == "load_after_prepare") {
        report_gradient_spread(module->parameters().front().grad());
      }
    }
    optimizer.step();
  }
  std::ofstream out(out_dir / ("params_rank" + std::to_string(context.world_rank()) + ".txt"));
  char text[64];
  // Parameters, then buffers (BatchNorm's running statistics), in registration order.
  std::vector<torch::Tensor> state = module->parameters();
  for (const auto& buffer : module->buffers()) state.push_back(buffer);
  for (const auto& param : state) {
    const auto flat = param.detach().to(torch::kDouble).reshape({-1});
    const auto values = flat.accessor<double, 1>();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      std::snprintf(text, sizeof(text), "%.9g\n", values[i]);
      out << text;
    }
  }
  return out ? 0 : 3;
}

using trainrun::runtime::testing::IndexDataset;

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

// A layer every rank uses, one only rank 0 uses, one none uses and a frozen one.
struct PartlyUsedNet : torch::nn::Module {
  PartlyUsedNet()
      : used(register_module("used", torch::nn::Linear(4, 1))),
        rank0_only(register_module("rank0_only", torch::nn::Linear(4, 1))),
        unused(register_module("unused", torch::nn::Linear(3, 3))),
        frozen(register_module("frozen", torch::nn::Linear(4, 1))) {
    for (auto& param : frozen->parameters()) param.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x, bool rank0) {
    auto out = used(x) + frozen(x);
    return rank0 ? out + rank0_only(x) : out;
  }
  torch::nn::Linear used, rank0_only, unused, frozen;
};

// optimizer: "adam" or "sgd" (with momentum), both with weight decay, which would move a
// parameter whose gradient is zeros rather than undefined.
int unused(const std::string& optimizer_name) {
  const auto& context = rt::get_context();
  torch::manual_seed(100 + static_cast<std::uint64_t>(context.world_rank()));
  auto net = rt::prepare_model(std::make_shared<PartlyUsedNet>());
  std::vector<torch::Tensor> unused_before;
  for (const auto& p : net->unused->parameters()) unused_before.push_back(p.detach().clone());
  for (const auto& p : net->frozen->parameters()) unused_before.push_back(p.detach().clone());
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_name == "adam") {
    optimizer = std::make_unique<torch::optim::Adam>(
        net->parameters(), torch::optim::AdamOptions(0.1).weight_decay(0.1));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
  }
  torch::manual_seed(7 + static_cast<std::uint64_t>(context.world_rank()));
  for (int step = 0; step < 3; ++step) {
    optimizer->zero_grad();
    const auto x = torch::randn({4, 4});
    torch::mse_loss(net->forward(x, context.world_rank() == 0), torch::zeros({4, 1})).backward();
    optimizer->step();
  }
  bool untouched = true;
  std::size_t k = 0;
  for (const auto& p : net->unused->parameters()) {
    untouched = untouched && !p.grad().defined() && torch::equal(p, unused_before[k++]);
  }
  for (const auto& p : net->frozen->parameters()) {
    untouched = untouched && !p.grad().defined() && torch::equal(p, unused_before[k++]);
  }
  bool averaged = net->rank0_only->weight.grad().defined();
  double spread = 0;
  for (const auto& p : net->parameters()) spread = std::max(spread, spread_across_ranks(p));
  std::printf("unused and frozen untouched: %s\nrank0_only averaged: %s\nspread: %g\n",
              untouched ? "yes" : "no", averaged ? "yes" : "no", spread);
  return 0;
}

// BatchNorm's running statistics on every rank after each step, each rank on its own data.
int batchnorm(bool broadcast_buffers) {
  const auto& context = rt::get_context();
  rt::PrepareModelOptions options;
  options.broadcast_buffers = broadcast_buffers;
  auto net =
      rt::prepare_model(torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                              torch::nn::Linear(8, 1)),
                        options);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
  torch::manual_seed(7 + static_cast<std::uint64_t>(context.world_rank()));
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();
    const auto x = torch::randn({8, 4}) * (context.world_rank() + 1);
    torch::mse_loss(net->forward(x), torch::zeros({8, 1})).backward();
    optimizer.step();
    double spread = 0;
    for (const auto& buffer : net->buffers()) {
      spread = std::max(spread, spread_across_ranks(buffer));
    }
    std::printf("step %d buffers %s\n", step, spread == 0 ? "equal" : "differ");
  }
  return 0;
}

// prepare_model, then converting the model: the next backward must refuse, not stop averaging.
int convert_after_prepare() {
  auto net = rt::prepare_model(torch::nn::Linear(4, 1));
  net->to(torch::kDouble);
  try {
    torch::mse_loss(net->forward(torch::randn({2, 4}, torch::kDouble)),
                    torch::zeros({2, 1}, torch::kDouble))
        .backward();
  } catch (const std::exception& e) {
    std::printf("refused: %s\n", e.what());
    return 0;
  }
  std::printf("converted model trained without complaint\n");
  return 3;
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
  std::string best;
  for (const auto& [checkpoint, metrics] : result.best_checkpoints) {
    best += checkpoint.path().filename().string() + "(epoch " +
            (metrics.is_object() && metrics.contains("epoch") ? metrics["epoch"].dump() : "none") +
            ") ";
  }
  std::printf("history: %zu lines, last epoch %s; best: %s\n", result.metrics_history.size(),
              result.metrics_history.empty()
                  ? "none"
                  : result.metrics_history.back()["epoch"].dump().c_str(),
              best.c_str());
  if (!result.ok()) std::printf("error: %s\n", result.error->c_str());
  return result.ok() ? 0 : 4;
}

// get_checkpoint() on every rank at the start and after a report. Just before each lookup rank 1
// puts a newer checkpoint_000099, which rank 0 never saved, into RUN_DIR (rank 0's run
// directory) and takes it away right after: a rank that listed the directory on its own would
// pick it up; rank 0 decides, so every rank must get rank 0's checkpoint.
int agree(const fs::path& run_dir) {
  auto train_func = [&] {
    const int rank = rt::get_context().world_rank();
    auto lookup = [&](const char* when) {
      const fs::path stray = run_dir / "checkpoint_000099";
      if (rank == 1) {
        fs::create_directories(stray);
        std::ofstream(stray / "epoch.txt") << "99\n";
      }
      const auto checkpoint = rt::get_checkpoint();
      if (rank == 1) fs::remove_all(stray);
      std::printf("rank %d %s: %s\n", rank, when,
                  checkpoint ? checkpoint->path().c_str() : "none");
    };
    lookup("at the start");
    const fs::path dir =
        fs::temp_directory_path() / ("trainrun_rt_agree_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "epoch.txt") << "2\n";
    rt::report({{"epoch", 2}}, rt::Checkpoint::from_directory(dir));
    fs::remove_all(dir);
    lookup("after a report");
  };
  rt::TorchTrainer trainer(train_func, rt::ScalingConfig{});
  const rt::Result result = trainer.fit();
  std::printf("result: ok=%d path=%s\n", result.ok() ? 1 : 0, result.path.c_str());
  if (!result.ok()) std::printf("error: %s\n", result.error->c_str());
  return result.ok() ? 0 : 4;
}

// Reports 8 times with scores out of order: checkpoints 0-6 with "loss" 0.5, 0.2, 0.9, 0.1, 0.7,
// 0.2 (a tie with 1) and none, and a last report without a checkpoint; then prints
// Result::best_checkpoints. order: the CheckpointConfig's score order, or "default" to leave it
// unset. keep: num_to_keep (0: keep all).
int scores(const std::string& order, int keep) {
  auto train_func = [] {
    const double loss[] = {0.5, 0.2, 0.9, 0.1, 0.7, 0.2};
    for (int epoch = 0; epoch < 8; ++epoch) {
      rt::Metrics metrics = {{"epoch", epoch}};
      if (epoch < 6) metrics["loss"] = loss[epoch];
      std::optional<rt::Checkpoint> checkpoint;
      const fs::path dir =
          fs::temp_directory_path() / ("trainrun_rt_scores_" + std::to_string(::getpid()));
      if (epoch < 7) {
        fs::create_directories(dir);
        std::ofstream(dir / "epoch.txt") << epoch << "\n";
        checkpoint = rt::Checkpoint::from_directory(dir);
      }
      rt::report(metrics, checkpoint);
      fs::remove_all(dir);
    }
  };
  rt::RunConfig run_config;
  run_config.checkpoint_config.checkpoint_score_attribute = "loss";
  if (order == "min") run_config.checkpoint_config.checkpoint_score_order = rt::ScoreOrder::min;
  if (order == "max") run_config.checkpoint_config.checkpoint_score_order = rt::ScoreOrder::max;
  if (keep > 0) run_config.checkpoint_config.num_to_keep = keep;
  rt::TorchTrainer trainer(train_func, rt::ScalingConfig{}, run_config);
  const rt::Result result = trainer.fit();
  std::string best;
  for (const auto& [checkpoint, metrics] : result.best_checkpoints) {
    std::ifstream in(checkpoint.path() / "epoch.txt");
    std::string saved;
    in >> saved;
    best += checkpoint.path().filename().string() + "(epoch " + metrics["epoch"].dump() +
            ", loss " + (metrics.contains("loss") ? metrics["loss"].dump() : "none") +
            ", saved " + saved + ") ";
  }
  std::printf("best: %s\n", best.c_str());
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
  if (mode == "agree" && argc == 3) return agree(argv[2]);
  if (mode == "scores" && (argc == 3 || argc == 4)) {
    return scores(argv[2], argc == 4 ? std::stoi(argv[3]) : 0);
  }
  if (mode == "fail") return fail();
  if (mode == "unused" && argc == 3) return unused(argv[2]);
  if (mode == "batchnorm" && argc == 3) return batchnorm(std::string(argv[2]) == "1");
  if (mode == "convert") return convert_after_prepare();
  if (mode == "stuck" && argc == 4) {
    return stuck(std::stoi(argv[2]), static_cast<unsigned>(std::stoul(argv[3])));
  }
  if (mode == "heartbeat" && argc == 3) return heartbeat(std::stoi(argv[2]));
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
