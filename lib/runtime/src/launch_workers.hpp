#pragma once

#include <filesystem>
#include <string>

namespace trainrun::runtime::detail {

// Runs `num_workers` copies of this executable, with its arguments, as one standalone job under
// the launch library, restarting the group up to `max_failures` times (-1: without limit).
// The workers inherit `experiment_name` and `storage_path` so they write where the caller reads.
// Returns the job's exit code.
int launch_workers(int num_workers, int max_failures, const std::string& experiment_name,
                   const std::filesystem::path& storage_path);

}  // namespace trainrun::runtime::detail
