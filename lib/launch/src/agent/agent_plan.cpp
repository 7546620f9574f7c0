#include "agent_plan.hpp"

#include <fmt/format.h>

#include "trainrun/base/wording.hpp"
#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"

namespace trainrun::launch {

std::optional<int> port_to_hold(const LaunchConfig& config, bool use_rendezvous) {
  // A single-node job needs no fixed port: unless one was asked for, take a free one.
  if (!use_rendezvous) return config.master_port_given ? config.master_port : 0;
  // Static: MASTER_PORT is given; the node that will run RANK 0 holds it.
  if (config.rdzv_backend == RendezvousBackend::static_) {
    if (config.node_rank == 0) return config.master_port;
    return std::nullopt;
  }
  // Dynamic: any node may become group rank 0, so each holds a free port to offer.
  return 0;
}

JobSettings job_settings(const LaunchConfig& config, const std::string& run_id) {
  JobSettings job;
  job.role = config.role;
  job.run_id = run_id;
  job.max_restarts = config.max_restarts;
  job.use_agent_store = false;
  job.signals_to_handle = config.signals_to_handle;
  job.virtual_local_rank = config.virtual_local_rank;
  return job;
}

std::string error_file_in(const std::string& rank_dir) { return rank_dir + "/error.json"; }

std::string attempt_line(const Topology& topology, int nproc) {
  return fmt::format("attempt {}: starting {} (ranks {}..{} of {}), MASTER_ADDR={} MASTER_PORT={}",
                     topology.restart_count, count_of(nproc, "worker"), topology.base_rank,
                     topology.base_rank + nproc - 1, topology.world_size, topology.master_addr,
                     topology.master_port);
}

std::string node_line(const rendezvous::Assignment& a, const std::string& host,
                      const std::string& advertised) {
  return fmt::format("node rank {} of {} (host {}, advertising {}; ranks {}..{})", a.group_rank,
                     count_of(a.group_world_size, "node"), host,
                     advertised.empty() ? "?" : advertised, a.base_rank,
                     a.base_rank + a.local_world_size - 1);
}

bool standalone_in_torchrun(const LaunchConfig& config) {
  return config.standalone ||
         (config.rdzv_backend == RendezvousBackend::static_ && config.max_nodes == 1 &&
          !config.master_port_given && config.rdzv_endpoint.empty());
}

Topology single_node_topology(const LaunchConfig& config, const std::string& one_node_master_addr,
                              int master_port) {
  const int nproc = config.nproc_per_node.number;
  const std::string& master =
      !one_node_master_addr.empty() ? one_node_master_addr : config.master_addr;
  return Topology{0, 1, 0, nproc, nproc, master, master_port, 0};
}

Topology assigned_topology(const rendezvous::Assignment& a, const LaunchConfig& config,
                           const std::string& one_node_master_addr) {
  // Alone in its job, this node's workers alone reach the store: torchrun 2.x's name for it.
  const std::string& master =
      config.max_nodes == 1 && !one_node_master_addr.empty() ? one_node_master_addr : a.master_addr;
  return Topology{a.group_rank,       a.group_world_size, a.base_rank,
                  a.local_world_size, a.world_size,       master,
                  a.master_port,      a.restart_count};
}

std::string one_node_master_addr(const LaunchConfig& config,
                                 const std::function<std::string()>& local_name) {
  if (config.rdzv_backend == RendezvousBackend::static_ && !standalone_in_torchrun(config))
    return config.master_addr;
  if (!config.local_addr.empty()) return config.local_addr;
  const std::string name = local_name();
  return name.empty() ? "127.0.0.1" : name;
}

std::string preference_line(const rendezvous::Assignment& a, int preferred) {
  if (preferred < 0 || a.group_rank == preferred) return {};
  const std::string why =
      preferred >= a.group_world_size
          ? fmt::format("round {} has {} (0..{})", a.round, count_of(a.group_world_size, "node"),
                        a.group_world_size - 1)
          : fmt::format(
                "another node holds it in round {} (the endpoint's node holds 0, a node "
                "keeps the rank it had, and of two asking the first by host name wins)",
                a.round);
  return fmt::format("--node-rank={} not free: {}; this node is node rank {}", preferred, why,
                     a.group_rank);
}

bool wants_diagnosis_channel(const LaunchConfig& config, const JobSettings& job) {
  return config.entry_mode != EntryMode::executable && job.torch && job.torch->major >= 2;
}

bool has_diagnosis_channel(const LaunchConfig& config, const JobSettings& job) {
  return wants_diagnosis_channel(config, job) && !config.no_diagnosis;
}

std::string no_diagnosis_line() {
  return "--no-diagnosis: the workers start as under torchrun, without a diagnosis channel; "
         "--hang-timeout and --stacks read their stacks (py-spy, eu-stack, /proc) but no flight "
         "recorder";
}

WorkerLaunch worker_launch(const LaunchConfig& config, const std::string& program,
                           const Topology& topology, const JobSettings& job, int local_rank,
                           const std::string& rank_dir, const std::string& host,
                           const std::map<std::string, std::string>& inherited) {
  // The user's PYTHONFAULTHANDLER, set or empty, decides alone.
  const std::vector<std::string> argv = worker_argv(config, !inherited.count("PYTHONFAULTHANDLER"));
  WorkerLaunch w;
  w.local_rank = local_rank;
  w.rank = topology.base_rank + local_rank;
  w.program = program;
  for (const auto& arg : argv) w.argv.push_back(expand_local_rank(arg, local_rank));
  // argv[0] is the program as the user named it, never expanded.
  w.argv[0] = argv[0];
  w.envp = merge_environment(
      inherited, worker_variables(topology, job, local_rank, error_file_in(rank_dir), inherited));
  w.output = plan_output(config, local_rank, rank_dir);
  w.prefix = line_prefix(config.log_line_prefix_template, config.role,
                         topology.base_rank + local_rank, local_rank, host);
  w.diagnosis = has_diagnosis_channel(config, job);
  return w;
}

}  // namespace trainrun::launch
