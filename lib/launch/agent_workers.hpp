#pragma once

#include <map>
#include <string>

#include "config.hpp"
#include "supervisor.hpp"
#include "worker_env.hpp"

namespace trainrun::launch {

// Everything needed to start worker `local_rank` of an attempt whose rank directory is
// `rank_dir`: `program` with the configured arguments (${local_rank} expanded), torchrun's
// environment on top of `inherited`, the output plan and the console prefix
// (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE in `inherited`). Pure: creates nothing.
WorkerLaunch worker_launch(const LaunchConfig& config, const std::string& program,
                           const Topology& topology, const JobSettings& job, int local_rank,
                           const std::string& rank_dir,
                           const std::map<std::string, std::string>& inherited);

// The worker's TORCHELASTIC_ERROR_FILE in its rank directory.
std::string error_file_in(const std::string& rank_dir);

}  // namespace trainrun::launch
