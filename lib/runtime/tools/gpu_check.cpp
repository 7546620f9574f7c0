// GPU check for CUDA builds of the runtime: a one-process NCCL all-reduce, one prepare_model
// training step on the GPU against the same step on the CPU, a state dict written on the GPU read
// back onto the CPU, a model moved before and after prepare_model, the data loader's batches on
// the device, and a short training run on cuda:LOCAL_RANK through TorchTrainer. Run by scripts/gpu-check.sh with the launcher
// variables of a one-worker job set. Exits 0 when both pass.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <trainrun/runtime/runtime.hpp>

namespace rt = trainrun::runtime;

namespace {

void check(bool ok, const std::string& what) {
  std::printf("gpu_check: %s: %s\n", what.c_str(), ok ? "ok" : "FAILED");
  std::fflush(stdout);
  if (!ok) throw std::runtime_error(what + " failed");
}

torch::nn::Sequential small_model() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::Tanh(),
                               torch::nn::Linear(32, 1));
}

// One SGD step of a prepared model on the GPU gives the parameters the same step gives on the CPU.
void step_matches_cpu(const c10::Device& device) {
  torch::manual_seed(11);
  const auto x = torch::randn({64, 16});
  const auto y = torch::randn({64, 1});
  auto on_cpu = small_model();
  auto on_gpu = rt::prepare_model(small_model());
  check(on_gpu->parameters()[0].device() == device, "prepare_model moved the model to " +
                                                        device.str());
  torch::optim::SGD cpu_sgd(on_cpu->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD gpu_sgd(on_gpu->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 2; ++step) {
    cpu_sgd.zero_grad();
    torch::mse_loss(on_cpu->forward(x), y).backward();
    cpu_sgd.step();
    gpu_sgd.zero_grad();
    torch::mse_loss(on_gpu->forward(x.to(device)), y.to(device)).backward();
    gpu_sgd.step();
  }
  double worst = 0;
  for (std::size_t i = 0; i < on_cpu->parameters().size(); ++i) {
    const auto diff = (on_gpu->parameters()[i].cpu() - on_cpu->parameters()[i]).abs().max();
    worst = std::max(worst, diff.item<double>());
  }
  check(worst < 1e-5, "two prepare_model SGD steps on " + device.str() +
                          " equal the CPU's (largest difference " + std::to_string(worst) + ")");

  // A state dict written from the GPU reads back onto the CPU (map_location).
  const std::string path =
      (std::filesystem::temp_directory_path() / "trainrun_gpu_check_state.pt").string();
  rt::save_state_dict(*on_gpu, path);
  const auto tensors = rt::load_tensors(path, torch::kCPU);
  check(tensors.at("0.weight").device().is_cpu() &&
            torch::equal(tensors.at("0.weight"), on_gpu->parameters()[0].cpu()),
        "a state dict saved from " + device.str() + " loads onto the CPU");
  std::remove(path.c_str());
}

// Moving a model between devices: before prepare_model it trains as usual; after it, the next
// backward refuses with one clear message instead of training unsynchronised.
void moves_between_devices(const c10::Device& device) {
  torch::manual_seed(13);
  const auto x = torch::randn({8, 16});
  const auto y = torch::randn({8, 1});
  auto before = small_model();
  before->to(device);
  before = rt::prepare_model(before);
  torch::mse_loss(before->forward(x.to(device)), y.to(device)).backward();
  check(before->parameters()[0].grad().defined() &&
            before->parameters()[0].grad().device() == device,
        "a model moved to " + device.str() + " before prepare_model gets its gradients there");

  auto after = rt::prepare_model(small_model());
  after->to(torch::kCPU);
  std::string refused;
  try {
    torch::mse_loss(after->forward(x), y).backward();
  } catch (const std::exception& e) {
    refused = e.what();
  }
  check(refused.find("moved or converted after prepare_model") != std::string::npos,
        "a model moved to the CPU after prepare_model is refused at its next backward");
}

// prepare_data_loader moves each batch to the training device (move_to_device, on by default)
// and leaves it where the dataset made it when asked to.
void loader_batches_on(const c10::Device& device) {
  struct Numbers : torch::data::datasets::Dataset<Numbers> {
    torch::data::Example<> get(std::size_t i) override {
      return {torch::tensor(static_cast<float>(i)), torch::tensor(0.0f)};
    }
    torch::optional<std::size_t> size() const override { return 8; }
  };
  rt::DataLoaderOptions options;
  options.batch_size = 4;
  auto moved = rt::prepare_data_loader(Numbers().map(torch::data::transforms::Stack<>()), options);
  bool all_on_device = true;
  for (auto& batch : moved)
    all_on_device &= batch.data.device() == device && batch.target.device() == device;
  check(all_on_device, "prepare_data_loader's batches are on " + device.str());
  options.move_to_device = false;
  auto kept = rt::prepare_data_loader(Numbers().map(torch::data::transforms::Stack<>()), options);
  bool all_on_cpu = true;
  for (auto& batch : kept) all_on_cpu &= batch.data.device().is_cpu();
  check(all_on_cpu, "with move_to_device off the batches stay on the CPU");
}

void train_func() {
  const auto& context = rt::get_context();
  const c10::Device device = rt::get_device();
  check(device.is_cuda(), "device is " + device.str());

  auto group = rt::get_process_group();
  check(group && group->getBackendName() == "nccl", "process group backend is NCCL");
  std::vector<torch::Tensor> tensors = {
      torch::full({1024}, context.world_rank() + 1.0, torch::TensorOptions().device(device))};
  group->allreduce(tensors)->wait();
  const double world = context.world_size();
  check(torch::allclose(tensors[0].cpu(), torch::full({1024}, world * (world + 1) / 2)),
        "NCCL all-reduce sum");
  step_matches_cpu(device);
  moves_between_devices(device);
  loader_batches_on(device);

  torch::manual_seed(0);
  auto model = rt::prepare_model(torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::ReLU(),
                                                       torch::nn::Linear(64, 1)));
  const auto x = torch::randn({512, 16}).to(device);
  const auto y = x.sum(1, true).sin().to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  double first = 0;
  double last = 0;
  for (int step = 0; step < 200; ++step) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    optimizer.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  rt::report({{"first_loss", first}, {"last_loss", last}});
  check(model->parameters()[0].device() == device, "model parameters on " + device.str());
  check(last < first * 0.5, "training on the GPU lowers the loss (" + std::to_string(first) +
                                " -> " + std::to_string(last) + ")");
}

}  // namespace

int main() {
  rt::TorchTrainer trainer(train_func, rt::ScalingConfig{0, true});
  const rt::Result result = trainer.fit();
  if (!result.ok()) {
    std::fprintf(stderr, "gpu_check: %s\n", result.error->c_str());
    return 1;
  }
  std::printf("gpu_check: all checks passed; metrics %s\n", result.metrics.dump().c_str());
  return 0;
}
