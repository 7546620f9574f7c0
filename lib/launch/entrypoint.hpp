#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "config.hpp"

namespace trainrun::launch {

// The entrypoint cannot be run: exit_code is the shell's (127 not found, 126 not executable).
class EntrypointError : public std::runtime_error {
 public:
  EntrypointError(const std::string& what, int exit_code)
      : std::runtime_error(what), exit_code(exit_code) {}
  int exit_code;
};

// Decides how workers run the entrypoint and checks it before any worker starts. A `.py` file
// (or -m) runs under Python; --no-python, or any other executable file, is executed directly;
// a non-executable file without --no-python is handed to Python, as torchrun does. Returns the
// config with entry_mode settled and `program` set to the path for execve.
struct ResolvedEntry {
  LaunchConfig config;
  std::string program;
};
ResolvedEntry resolve_entrypoint(const LaunchConfig& config,
                                 const std::map<std::string, std::string>& env);

// PATH lookup as execvp does it; empty when not found.
std::string find_in_path(const std::string& name, const std::string& path_variable);

}  // namespace trainrun::launch
