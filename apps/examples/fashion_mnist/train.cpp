#include "train.hpp"

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>
#include <torch/utils.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <trainrun/runtime/runtime.hpp>
#include <vector>

#include "resnet.hpp"

namespace fashion_mnist {

namespace fs = std::filesystem;
namespace rt = trainrun::runtime;

namespace {

constexpr double pixel_mean = 0.28604;
constexpr double pixel_std = 0.32025;
constexpr std::int64_t num_classes = 10;
constexpr std::size_t eval_batch_size = 1000;

torch::Tensor to_images(const Images& images) {
  return torch::from_blob(
      const_cast<std::uint8_t*>(images.pixels.data()),
      {static_cast<std::int64_t>(images.count), 1, static_cast<std::int64_t>(images.rows),
       static_cast<std::int64_t>(images.cols)},
      torch::kUInt8);
}

torch::Tensor to_labels(const std::vector<std::uint8_t>& labels) {
  return torch::from_blob(const_cast<std::uint8_t*>(labels.data()),
                          {static_cast<std::int64_t>(labels.size())}, torch::kUInt8)
      .to(torch::kInt64);
}

torch::Tensor normalize(const torch::Tensor& pixels) {
  return pixels.to(torch::kFloat32).div_(255.0).sub_(pixel_mean).div_(pixel_std);
}

// A batch is gathered with one index_select rather than stacking single examples. Pixels stay
// uint8 (views of the decoded files, which outlive training) and are normalised per batch.
class ImageDataset
    : public torch::data::datasets::BatchDataset<ImageDataset, torch::data::Example<>,
                                                 c10::ArrayRef<std::size_t>> {
 public:
  explicit ImageDataset(const Split& split)
      : images_(to_images(split.images)), labels_(to_labels(split.labels)) {}

  torch::data::Example<> get_batch(c10::ArrayRef<std::size_t> indices) override {
    std::vector<std::int64_t> rows(indices.begin(), indices.end());
    const torch::Tensor index = torch::tensor(rows, torch::kInt64);
    return {normalize(images_.index_select(0, index)), labels_.index_select(0, index)};
  }
  torch::optional<std::size_t> size() const override {
    return static_cast<std::size_t>(images_.size(0));
  }

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
};

// Sums `values` over all ranks (a no-op in local mode), on the training device: NCCL reduces
// GPU tensors only.
torch::Tensor all_ranks_sum(torch::Tensor values) {
  if (auto group = rt::get_process_group()) {
    std::vector<torch::Tensor> tensors = {values.to(rt::get_device())};
    group->allreduce(tensors)->wait();
    return tensors[0].cpu();
  }
  return values;
}

// Rank 0's value everywhere, so all ranks resume at the same epoch whatever they read.
std::int64_t from_rank0(std::int64_t value) {
  torch::Tensor tensor = torch::tensor({value}, torch::kInt64).to(rt::get_device());
  if (auto group = rt::get_process_group()) {
    std::vector<torch::Tensor> tensors = {tensor};
    group->broadcast(tensors)->wait();
  }
  return tensor.item<std::int64_t>();
}

// Test accuracy: each rank classifies every world_size-th test image; counts are summed.
double evaluate(ResNet& model, const Split& test) {
  const rt::TrainContext& context = rt::get_context();
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor images = to_images(test.images);
  const torch::Tensor labels = to_labels(test.labels);
  const torch::Tensor mine =
      torch::arange(context.world_rank(), images.size(0), context.world_size(), torch::kInt64);
  std::int64_t correct = 0;
  for (std::int64_t begin = 0; begin < mine.size(0); begin += eval_batch_size) {
    const torch::Tensor index = mine.slice(0, begin, begin + eval_batch_size);
    const torch::Tensor predicted =
        model->forward(normalize(images.index_select(0, index)).to(rt::get_device()))
            .argmax(1)
            .cpu();
    correct += predicted.eq(labels.index_select(0, index)).sum().item<std::int64_t>();
  }
  model->train();
  const torch::Tensor totals = all_ranks_sum(torch::tensor(
      {static_cast<double>(correct), static_cast<double>(mine.size(0))}, torch::kFloat64));
  return totals[0].item<double>() / totals[1].item<double>();
}

int crashing_rank(const rt::TrainContext& context) { return context.world_size() > 1 ? 1 : 0; }

// The marker lives in the run directory, which every restart of one job shares.
fs::path crash_marker(const Options& options) {
  rt::RunConfig config;
  config.name = options.name;
  config.storage_path = options.storage_path;
  return rt::resolve_storage_path(config, rt::current_environment()) /
         rt::get_context().experiment_name() / "crashed_once";
}

void crash_once(const Options& options, int epoch) {
  const rt::TrainContext& context = rt::get_context();
  if (!options.crash_once_at_epoch || *options.crash_once_at_epoch != epoch ||
      context.world_rank() != crashing_rank(context)) {
    return;
  }
  const fs::path marker = crash_marker(options);
  if (fs::exists(marker)) return;
  fs::create_directories(marker.parent_path());
  std::ofstream(marker) << epoch << "\n";
  std::fprintf(stderr,
               "fashion_mnist: rank %d exits at the start of epoch %d (--crash-once-at-epoch)\n",
               context.world_rank(), epoch);
  std::fflush(nullptr);
  std::_Exit(3);
}

// The sum of every parameter and buffer, printed so that a test can compare it with Python's.
double state_sum(const torch::nn::Module& model) {
  double sum = 0;
  for (const auto& item : model.named_parameters()) {
    sum += item.value().to(torch::kDouble).sum().item<double>();
  }
  for (const auto& item : model.named_buffers()) {
    sum += item.value().to(torch::kDouble).sum().item<double>();
  }
  return sum;
}

// A fresh directory for one checkpoint; report() copies it into the run directory.
fs::path write_checkpoint(ResNet& model, torch::optim::Adam& optimizer, int epoch) {
  std::string pattern = (fs::temp_directory_path() / "fashion_mnist_ckpt_XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a checkpoint directory under " +
                             fs::temp_directory_path().string());
  }
  const fs::path dir = pattern;
  rt::save_state_dict(*model, dir / "model.pt");
  torch::save(optimizer, (dir / "optimizer.pt").string());
  std::ofstream(dir / "train_state.json") << nlohmann::json{{"epoch", epoch}}.dump() << "\n";
  return dir;
}

// The epoch a checkpoint was written after (its train_state.json).
int checkpoint_epoch(const fs::path& dir) {
  std::ifstream state(dir / "train_state.json");
  const auto json = nlohmann::json::parse(state, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("epoch") || !json["epoch"].is_number_integer()) {
    throw std::runtime_error(dir.string() +
                             "/train_state.json: missing, or without an integer \"epoch\": not a "
                             "checkpoint of this program (choose another --name)");
  }
  return json["epoch"].get<int>();
}

}  // namespace

void train(const Options& options, const Data& data) {
  const rt::TrainContext& context = rt::get_context();
  const bool leader = context.world_rank() == 0;
  if (options.threads > 0) torch::set_num_threads(options.threads);
  torch::manual_seed(options.seed);

  ResNet model = resnet18(/*in_channels=*/1, num_classes);
  // After a restart, the last reported checkpoint (the previous attempt's) is where to resume.
  const std::optional<rt::Checkpoint> checkpoint = rt::get_checkpoint();
  if (checkpoint) {
    rt::load_state_dict(*model, checkpoint->path() / "model.pt");
  } else if (!options.init_model.empty()) {
    rt::load_state_dict(*model, options.init_model);
    const double sum = state_sum(*model);
    if (leader) std::printf("initial state dict %s: sum %.6f\n", options.init_model.c_str(), sum);
  }
  // Broadcasts rank 0's weights, then averages gradients over all ranks after each backward.
  model = rt::prepare_model(model);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(options.lr));
  int first_epoch = 1;
  if (checkpoint) {
    torch::load(optimizer, (checkpoint->path() / "optimizer.pt").string(), rt::get_device());
    first_epoch = checkpoint_epoch(checkpoint->path()) + 1;
  }
  // Every rank must run the same epochs: rank 0's checkpoint decides.
  first_epoch = static_cast<int>(from_rank0(first_epoch));
  if (leader && checkpoint) {
    std::printf("resuming after epoch %d from %s\n", first_epoch - 1, checkpoint->path().c_str());
  }

  rt::DataLoaderOptions loader_options;
  loader_options.batch_size = options.batch_size;
  loader_options.shuffle = true;
  auto loader = rt::prepare_data_loader(ImageDataset(data.train), loader_options);
  if (leader) {
    std::printf(
        "training on %zu images, testing on %zu, %d worker(s), batch %zu per worker, "
        "%d thread(s) each\n",
        data.train.images.count, data.test.images.count, context.world_size(), options.batch_size,
        torch::get_num_threads());
    std::fflush(stdout);
  }

  // Without an epoch left to run (a finished run resumed), evaluate the checkpoint instead.
  double test_accuracy = first_epoch > options.epochs ? evaluate(model, data.test) : 0.0;
  for (int epoch = first_epoch; epoch <= options.epochs; ++epoch) {
    crash_once(options, epoch);
    loader.set_epoch(static_cast<std::size_t>(epoch) + options.seed);
    model->train();
    double loss_sum = 0;
    std::int64_t images = 0, correct = 0;
    std::size_t steps = 0;
    const auto start = std::chrono::steady_clock::now();
    for (auto& batch : loader) {
      if (options.max_steps && steps == *options.max_steps) break;
      optimizer.zero_grad();
      const torch::Tensor output = model->forward(batch.data);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(output, batch.target);
      loss.backward();
      optimizer.step();
      const std::int64_t n = batch.target.size(0);
      const double step_loss = loss.item<double>();
      loss_sum += step_loss * static_cast<double>(n);
      images += n;
      correct += output.argmax(1).eq(batch.target).sum().item<std::int64_t>();
      ++steps;
      if (leader && options.log_every > 0 && steps % options.log_every == 0) {
        std::printf("epoch %d step %zu: loss %.6f\n", epoch, steps, step_loss);
        std::fflush(stdout);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const torch::Tensor totals = all_ranks_sum(torch::tensor(
        {loss_sum, static_cast<double>(images), static_cast<double>(correct)}, torch::kFloat64));
    const double all_images = totals[1].item<double>();
    test_accuracy = evaluate(model, data.test);

    rt::Metrics metrics = {{"epoch", epoch},
                           {"loss", totals[0].item<double>() / all_images},
                           {"train_accuracy", totals[2].item<double>() / all_images},
                           {"test_accuracy", test_accuracy},
                           {"images_per_s", all_images / seconds},
                           {"epoch_s", seconds}};
    // Printed before report(): the other ranks return from it only once rank 0 is done, so a
    // rank that then ends the attempt (a crash, --crash-once-at-epoch) cannot cut this line off.
    if (leader) {
      std::printf(
          "epoch %d/%d: loss %.4f, train accuracy %.2f%%, test accuracy %.2f%%, "
          "%.0f images/s (%.1f s)\n",
          epoch, options.epochs, metrics["loss"].get<double>(),
          100 * metrics["train_accuracy"].get<double>(), 100 * test_accuracy,
          metrics["images_per_s"].get<double>(), seconds);
      std::fflush(stdout);
    }
    // Rank 0's checkpoint is the one kept; the other ranks' would be ignored, so they skip it.
    std::optional<fs::path> dir;
    if (leader) dir = write_checkpoint(model, optimizer, epoch);
    rt::report(metrics, dir ? std::optional(rt::Checkpoint::from_directory(*dir)) : std::nullopt);
    if (dir) fs::remove_all(*dir);
  }

  if (leader) {
    std::printf("test accuracy: %.2f%% (%zu test images)\n", 100 * test_accuracy,
                data.test.images.count);
    std::fflush(stdout);
  }
}

}  // namespace fashion_mnist
