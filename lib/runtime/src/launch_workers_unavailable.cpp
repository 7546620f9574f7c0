#include <trainrun/runtime/errors.hpp>

#include "launch_workers.hpp"

namespace trainrun::runtime::detail {

int launch_workers(int num_workers, int, const std::string&, const std::filesystem::path&) {
  throw ConfigError("ScalingConfig::num_workers=" + std::to_string(num_workers) +
                    ": this libtrainrun_runtime was built without the launch library, so it "
                    "cannot start workers itself; run the program under trainrun or torchrun "
                    "with num_workers = 0");
}

}  // namespace trainrun::runtime::detail
