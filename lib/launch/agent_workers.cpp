#include "agent_workers.hpp"

#include <optional>

#include "output.hpp"

namespace trainrun::launch {

std::string error_file_in(const std::string& rank_dir) { return rank_dir + "/error.json"; }

WorkerLaunch worker_launch(const LaunchConfig& config, const std::string& program,
                           const Topology& topology, const JobSettings& job, int local_rank,
                           const std::string& rank_dir,
                           const std::map<std::string, std::string>& inherited) {
  std::optional<std::string> prefix_template;
  if (auto it = inherited.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != inherited.end())
    prefix_template = it->second;
  const std::vector<std::string> argv = config.worker_argv();
  WorkerLaunch w;
  w.local_rank = local_rank;
  w.program = program;
  for (const auto& arg : argv) w.argv.push_back(expand_local_rank(arg, local_rank));
  // argv[0] is the program as the user named it, never expanded.
  w.argv[0] = argv[0];
  w.envp = merge_environment(
      inherited, worker_variables(topology, job, local_rank, error_file_in(rank_dir), inherited));
  w.output = plan_output(config, local_rank, rank_dir);
  w.prefix = line_prefix(prefix_template, config.role, topology.base_rank + local_rank, local_rank);
  return w;
}

}  // namespace trainrun::launch
