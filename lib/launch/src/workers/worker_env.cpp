#include "trainrun/launch/workers/worker_env.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <utility>

#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/rdzv/rendezvous_token.hpp"
#include "trainrun/launch/workers/flight_recorder.hpp"

extern char** environ;

namespace trainrun::launch {

namespace {

// The variable that says which GPUs the launcher sees, and its list: HIP's wins on ROCm.
std::pair<std::string, std::optional<std::vector<std::string>>> visible_gpus(
    const std::map<std::string, std::string>& inherited) {
  for (const char* name : {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    auto it = inherited.find(name);
    const bool hip = std::string(name) == "HIP_VISIBLE_DEVICES";
    if (it == inherited.end() || (hip && it->second.empty())) continue;  // torchrun: "" is unset
    std::vector<std::string> ids;
    std::stringstream items(it->second);
    for (std::string id; std::getline(items, id, ',');) ids.push_back(id);
    return {name, ids};
  }
  return {"CUDA_VISIBLE_DEVICES", std::nullopt};
}

// torchrun 2.x's virtual local rank: every worker is local rank 0 of a one-GPU node.
void set_virtual_local_rank(int local_rank, const std::map<std::string, std::string>& inherited,
                            std::map<std::string, std::string>& v) {
  v["LOCAL_RANK"] = "0";
  const auto [name, ids] = visible_gpus(inherited);
  const std::string gpu =
      ids ? trainrun::trim(ids->at(static_cast<size_t>(local_rank))) : std::to_string(local_rank);
  v["CUDA_VISIBLE_DEVICES"] = gpu;
  if (name == "HIP_VISIBLE_DEVICES") v["HIP_VISIBLE_DEVICES"] = gpu;
}

}  // namespace

void check_virtual_local_rank(int local_world_size,
                              const std::map<std::string, std::string>& inherited) {
  const auto [name, ids] = visible_gpus(inherited);
  if (ids && static_cast<int>(ids->size()) < local_world_size)
    throw UsageError(fmt::format(
        "--virtual-local-rank: {} per node but {}={} lists {}; give each worker one, or lower "
        "--nproc-per-node",
        count_of(local_world_size, "worker"), name, inherited.at(name),
        count_of(static_cast<long long>(ids->size()), "GPU")));
}

std::map<std::string, std::string> worker_variables(
    const Topology& t, const JobSettings& job, int local_rank, const std::string& error_file,
    const std::map<std::string, std::string>& inherited) {
  const std::string rank = std::to_string(t.base_rank + local_rank);
  const std::string world = std::to_string(t.world_size);
  std::map<std::string, std::string> v = {
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"RANK", rank},
      {"GROUP_RANK", std::to_string(t.group_rank)},
      {"ROLE_RANK", rank},
      {"ROLE_NAME", job.role},
      {"LOCAL_WORLD_SIZE", std::to_string(t.local_world_size)},
      {"WORLD_SIZE", world},
      {"GROUP_WORLD_SIZE", std::to_string(t.group_world_size)},
      {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", t.master_addr},
      {"MASTER_PORT", std::to_string(t.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(t.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(job.max_restarts)},
      {"TORCHELASTIC_RUN_ID", job.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", job.use_agent_store ? "True" : "False"},
      {"TORCHELASTIC_ERROR_FILE", error_file},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", job.signals_to_handle},
  };
  if (job.virtual_local_rank) set_virtual_local_rank(local_rank, inherited, v);
  if (!inherited.count("TORCH_NCCL_ASYNC_ERROR_HANDLING"))
    v["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  // Torch before 2.0 reads only the old name; 2.x reads it too and warns that it is deprecated.
  if (job.torch && job.torch->major == 1 && !inherited.count("NCCL_ASYNC_ERROR_HANDLING"))
    v["NCCL_ASYNC_ERROR_HANDLING"] = "1";
  if (t.local_world_size > 1 && !inherited.count("OMP_NUM_THREADS")) v["OMP_NUM_THREADS"] = "1";
  if (!job.heartbeat_file.empty()) v[kHeartbeatFileVariable] = job.heartbeat_file;
  // Every torch 2.x process group records its collectives, Gloo's too, once the buffer has a
  // size: the roll call reads them (a hang's rank behind). NCCL's dumps go to the worker's own log
  // directory, where the error file is.
  if (job.may_use_nccl || (job.torch && job.torch->major >= 2)) {
    const std::string rank_dir = error_file.substr(0, error_file.rfind('/'));
    for (auto& [name, value] :
         flight_recorder_variables(rank_dir, inherited, job.torch, job.may_use_nccl))
      v[name] = value;
  }
  return v;
}

const std::set<std::string>& rank_variables() {
  static const std::set<std::string> names = {"LOCAL_RANK",
                                              "RANK",
                                              "GROUP_RANK",
                                              "ROLE_RANK",
                                              "WORLD_SIZE",
                                              "GROUP_WORLD_SIZE",
                                              "ROLE_WORLD_SIZE",
                                              "MASTER_ADDR",
                                              "MASTER_PORT",
                                              "TORCHELASTIC_RESTART_COUNT",
                                              "TORCHELASTIC_ERROR_FILE",
                                              "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                                              "TORCH_FR_DUMP_TEMP_FILE",
                                              "CUDA_VISIBLE_DEVICES",
                                              "HIP_VISIBLE_DEVICES"};
  return names;
}

std::vector<std::string> shared_environment(const std::vector<std::vector<std::string>>& envps) {
  std::vector<std::string> shared;
  if (envps.empty()) return shared;
  for (const std::string& entry : envps.front()) {
    if (rank_variables().count(entry.substr(0, entry.find('=')))) continue;
    const bool everywhere = std::all_of(envps.begin() + 1, envps.end(), [&](const auto& envp) {
      return std::find(envp.begin(), envp.end(), entry) != envp.end();
    });
    if (everywhere) shared.push_back(entry);
  }
  return shared;
}

bool runs_python(const std::string& program) {
  const std::string name = program.substr(program.rfind('/') + 1);
  return name.rfind("python", 0) == 0;
}

std::vector<std::string> merge_environment(const std::map<std::string, std::string>& inherited,
                                           const std::map<std::string, std::string>& variables) {
  std::map<std::string, std::string> merged = inherited;
  // The rendezvous token is the launcher's secret: a worker has no use for it, and whatever a
  // worker runs (and every core dump or /proc/PID/environ reader) would learn it.
  merged.erase(kTokenVariable);
  for (const auto& [k, val] : variables) merged[k] = val;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, val] : merged) out.push_back(k + "=" + val);
  return out;
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

}  // namespace trainrun::launch
