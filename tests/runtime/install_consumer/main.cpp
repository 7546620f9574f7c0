#include <cstdio>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/report.hpp>
#include <trainrun/runtime/trainer.hpp>

namespace rt = trainrun::runtime;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer STORAGE_DIR\n");
    return 2;
  }
  rt::RunConfig run_config;
  run_config.name = "consumer";
  run_config.storage_path = argv[1];
  rt::TorchTrainer trainer(
      [] {
        rt::report({{"world", rt::get_context().world_size()}});
      },
      rt::ScalingConfig{}, run_config);
  const rt::Result result = trainer.fit();
  if (!result.ok() || result.metrics["world"] != 1) {
    std::fprintf(stderr, "consumer: unexpected result: %s\n", result.metrics.dump().c_str());
    return 1;
  }
  std::printf("consumer ok: %s\n", result.path.c_str());
  return 0;
}
