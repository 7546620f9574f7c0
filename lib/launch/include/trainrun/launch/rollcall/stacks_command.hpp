#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainrun::launch {

// `trainrun --stacks[=ID|PID]` (`--stacks ID` too): the selector, empty for none; nothing when
// the command line is not one (it then starts a job). Only as the first argument: after it come
// torchrun's options and the script, which may be called anything. Throws UsageError for
// anything after the selector.
std::optional<std::string> stacks_selector(const std::vector<std::string>& args);

// Finds the job (job_registry.hpp), asks its agent for every worker's stack and prints the
// report on stdout. Returns 0; throws LaunchError (exit 1) with one line when there is no such
// job, it belongs to another user, or it cannot be asked.
int run_stacks_command(const std::string& selector, const std::map<std::string, std::string>& env);

}  // namespace trainrun::launch
