#include "worker_env.hpp"

#include <unistd.h>

extern char** environ;

namespace trainrun::launch {

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
  };
  for (const char* name : {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"})
    if (!inherited.count(name)) v[name] = "1";
  if (t.local_world_size > 1 && !inherited.count("OMP_NUM_THREADS")) v["OMP_NUM_THREADS"] = "1";
  return v;
}

std::vector<std::string> merge_environment(const std::map<std::string, std::string>& inherited,
                                           const std::map<std::string, std::string>& variables) {
  std::map<std::string, std::string> merged = inherited;
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
