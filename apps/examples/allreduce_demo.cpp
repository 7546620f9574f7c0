// Each worker all-reduces a tensor holding rank+1 and checks the sum is W(W+1)/2. The runtime
// reads the variables torchrun and trainrun give their workers; with none of them this is world 1.
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <vector>

namespace rt = trainrun::runtime;

namespace {

int run() {
  const rt::TrainContext& context = rt::get_context();
  std::vector<at::Tensor> tensors = {torch::full({4}, context.world_rank() + 1, torch::kInt64)};
  // Local mode has no process group: one process's tensor is already the sum.
  if (auto group = rt::get_process_group()) group->allreduce(tensors)->wait();

  const std::int64_t world = context.world_size();
  const std::int64_t expected = world * (world + 1) / 2;
  const bool ok = torch::all(tensors[0] == expected).item<bool>();
  std::printf("rank %d/%d: all_reduce sum=%lld (expected %lld) %s\n", context.world_rank(),
              context.world_size(), static_cast<long long>(tensors[0][0].item<std::int64_t>()),
              static_cast<long long>(expected), ok ? "ok" : "WRONG");
  std::fflush(stdout);
  rt::shutdown();
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const rt::ConfigError& e) {
    std::cerr << "allreduce_demo: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "allreduce_demo: all-reduce failed: " << e.what() << "\n";
    return 1;
  }
}
