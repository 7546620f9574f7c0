#pragma once

#include <map>
#include <string>

#include "config.hpp"
#include "errors.hpp"

namespace trainrun::launch {

// Decides how workers run the entrypoint and checks it before any worker starts. A `.py` file
// (or -m) runs under Python; --no-python, or any other executable file, is executed directly;
// a non-executable file without --no-python is handed to Python, as torchrun does. Returns the
// config with entry_mode settled and `program` set to the path for execve; throws
// EntrypointError when the entrypoint cannot be run.
struct ResolvedEntry {
  LaunchConfig config;
  std::string program;
};
ResolvedEntry resolve_entrypoint(const LaunchConfig& config,
                                 const std::map<std::string, std::string>& env);

}  // namespace trainrun::launch
