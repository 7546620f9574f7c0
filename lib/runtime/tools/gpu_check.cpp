// GPU check for CUDA builds of the runtime: a one-process NCCL all-reduce and a short training
// run on cuda:LOCAL_RANK through TorchTrainer. Run by scripts/gpu-check.sh with the launcher
// variables of a one-worker job set. Exits 0 when both pass.
#include <torch/torch.h>

#include <cstdio>
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
