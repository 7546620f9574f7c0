#include "worker_group_launch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "agent_plan.hpp"
#include "trainrun/launch/output/output_plan.hpp"

namespace trainrun::launch {

namespace {

const bool started_with_stdout_open = ::fcntl(STDOUT_FILENO, F_GETFD) >= 0;

}  // namespace

bool stdout_passes_through() { return started_with_stdout_open && ::isatty(STDOUT_FILENO) == 0; }

WorkerGroupLaunch::WorkerGroupLaunch(const LaunchConfig& config, std::string program,
                                     std::string host, bool capture_stderr, bool capture_stdout)
    : config_(config),
      program_(std::move(program)),
      host_(std::move(host)),
      capture_stderr_(capture_stderr),
      capture_stdout_(capture_stdout) {}

void WorkerGroupLaunch::plan_numa(const std::map<std::string, std::string>& inherited,
                                  const std::function<void(const std::string&, Level)>& say) {
  if (config_.numa_binding.empty()) return;
  numa_ = plan_numa_binding(config_.numa_binding, config_.nproc_per_node.number,
                            sysfs_root(inherited), inherited, own_cpu_affinity());
  for (const auto& line : numa_.warnings) say(line, Level::warning);
  for (const auto& line : numa_.details) say(line, Level::debug);
}

std::vector<WorkerLaunch> WorkerGroupLaunch::launches(
    const Topology& topology, const JobSettings& job, const LogDir& logs,
    const std::map<std::string, std::string>& inherited, bool watched) const {
  std::vector<WorkerLaunch> out;
  for (int lr = 0; lr < config_.nproc_per_node.number; ++lr) {
    const std::string rank_dir = logs.make_rank_dir(topology.restart_count, lr);
    ::unlink(error_file_in(rank_dir).c_str());
    out.push_back(worker_launch(config_, program_, topology, job, lr, rank_dir, host_, inherited));
    if (static_cast<size_t>(lr) < numa_.cpus.size())
      out.back().cpus = numa_.cpus[static_cast<size_t>(lr)];
    if (capture_stderr_ || watched) capture_inherited(out.back().output.err);
    if (capture_stdout_ || watched) capture_inherited(out.back().output.out);
  }
  return out;
}

}  // namespace trainrun::launch
