#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainrun/launch/core/job.hpp"

namespace trainrun::launch {

// Whether `program` (the path a worker execs) is a Python interpreter: its name starts with
// "python" (python3, python3.11).
bool runs_python(const std::string& program);

// The variables torchrun gives worker `local_rank` (every value a string). `error_file` is that
// worker's TORCHELASTIC_ERROR_FILE. `inherited` is the launcher's environment: variables the
// user set themselves (OMP_NUM_THREADS, NCCL_ASYNC_ERROR_HANDLING) are left alone.
std::map<std::string, std::string> worker_variables(
    const Topology& topology, const JobSettings& job, int local_rank, const std::string& error_file,
    const std::map<std::string, std::string>& inherited);

// The variables of worker_variables whose value may differ between the workers of a node or
// between its attempts (RANK, MASTER_PORT, TORCHELASTIC_ERROR_FILE, ...): what a process shared
// by every worker of every attempt (the --preload template, warm_start.hpp) is not given, and a
// preloaded module must not read when it is imported (docs/cli.md).
const std::set<std::string>& rank_variables();

// The environment of a process shared by the workers whose environments ("NAME=value") are
// `envps`: the entries every one of them holds alike, less rank_variables().
std::vector<std::string> shared_environment(const std::vector<std::vector<std::string>>& envps);

// With --virtual-local-rank, the GPU list each worker picks its own from
// (HIP_VISIBLE_DEVICES when set, else CUDA_VISIBLE_DEVICES) must have one for every local rank:
// throws UsageError naming the variable otherwise. Without that list, worker i gets GPU i.
void check_virtual_local_rank(int local_world_size,
                              const std::map<std::string, std::string>& inherited);

// The launcher's environment with `variables` set on top, as "NAME=value" strings for execve.
// TRAINRUN_RDZV_TOKEN, the rendezvous' secret, is left out.
std::vector<std::string> merge_environment(const std::map<std::string, std::string>& inherited,
                                           const std::map<std::string, std::string>& variables);

// The current process environment as a map.
std::map<std::string, std::string> current_environment();

}  // namespace trainrun::launch
