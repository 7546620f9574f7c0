#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

Std StdSpec::for_rank(int local_rank) const {
  if (!is_map) return all_ranks;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::none : it->second;
}

LaunchConfig standalone_job(const LaunchConfig& config) {
  LaunchConfig job = config;
  job.standalone = true;
  job.min_nodes = job.max_nodes = 1;
  job.rdzv_backend = RendezvousBackend::c10d;
  job.rdzv_endpoint = "localhost:0";
  return job;
}

}  // namespace trainrun::launch
