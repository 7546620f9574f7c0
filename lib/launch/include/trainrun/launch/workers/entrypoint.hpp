#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/launch_config.hpp"

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

// Why execve(program) failed with `err`, in a shell's words and with its exit status: 127 for a
// program that is not there, 126 for one that cannot run (ENOEXEC: "exec format error"; ELOOP:
// "too many levels of symbolic links"; EACCES: permission denied).
EntrypointError exec_error(const std::string& program, int err);

// The program and arguments each worker runs, before ${local_rank} expansion: the entrypoint
// itself, or Python (-u, -m for a module) with it, as torchrun's; `faulthandler` adds
// `-X faulthandler` there (a fatal signal prints every thread's Python traceback).
std::vector<std::string> worker_argv(const LaunchConfig& config, bool faulthandler = false);

// How many of the first entries of a Python worker's argv (worker_argv) are the interpreter and its
// options: what comes after them is `-m MODULE` or the script, then its arguments.
std::size_t python_options_end(const std::vector<std::string>& argv);

// "${local_rank}" and "$local_rank" become the rank; "$$" becomes "$".
std::string expand_local_rank(const std::string& arg, int local_rank);

}  // namespace trainrun::launch
