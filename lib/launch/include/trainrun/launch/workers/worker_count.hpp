#pragma once

#include <optional>
#include <string>

#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// How many workers this node runs for `count`: the number itself, or what the node has, counted
// now. cpu: the CPUs this process may run on. gpu: the NVIDIA GPUs it may use, without linking
// CUDA or running a program (CUDA_VISIBLE_DEVICES when set, else count_nvidia_devices); throws
// UsageError when there are none. xpu: the Intel GPUs, counted as
// count_intel_xpus does; throws UsageError when there are none. auto: the NVIDIA GPUs, else the
// Intel ones, else the CPUs.
int resolve_worker_count(const WorkerCount& count);

// The NVIDIA GPUs this process may use, as --nproc-per-node=gpu counts them; 0 when none. Read
// once per process.
int count_nvidia_gpus();

// The NVIDIA GPUs the driver shows: the GPU device nodes in `dev_dir` (nvidia0, nvidia1, ...; in
// a container, those it was given), else the entries of `driver_dir` (/proc/driver/nvidia/gpus:
// every GPU of the machine, for when the device nodes are not made yet); 0 without a driver.
int count_nvidia_devices(const std::string& dev_dir, const std::string& driver_dir);

// What bounds the processes this machine lets one user start; 0 where there is no bound.
struct ProcessLimits {
  long long rlimit_nproc = 0;  // RLIMIT_NPROC, this user's processes and threads (soft limit)
  long long pid_max = 0;       // kernel.pid_max: the process ids there are
  long long threads_max = 0;   // kernel.threads-max: the threads the kernel will make
  long long pids_max = 0;      // the cgroup's pids.max: the tasks of its processes, all users'
  std::string pids_max_file;   // where pids_max is set
};

// This machine's limits, read now (getrlimit, /proc/sys/kernel, this process's cgroups).
ProcessLimits read_process_limits();

// Each worker is at least one process, so a node runs at most the smallest of the rendezvous
// protocol's kMaxNproc and `limits`. Throws UsageError naming `what`, the bound and why when
// `workers` exceed it, the same on one node as on many.
void check_worker_bound(int workers, const ProcessLimits& limits, const std::string& what);

// check_worker_bound for a job's worker count as the command line gave it, naming where it came
// from (a count still to be counted on the node, gpu or cpu, is what the node has).
void check_worker_limits(const LaunchConfig& config, const ProcessLimits& limits);
// The same against this machine's limits, read now: the step after parse_command_line, which
// reads nothing of the machine, before a job starts on it (main, TorchTrainer).
void check_machine_limits(const LaunchConfig& config);

// The line for a worker that could not be started because fork failed with `error`: for
// EAGAIN, it names the limits on processes that `limits` knows of: one of them stopped it.
std::string fork_failure(int local_rank, int error, const ProcessLimits& limits);

// The Intel GPUs under `drm_dir` (/sys/class/drm): render nodes whose PCI vendor is 0x8086, as
// Level Zero would list them to torch.xpu, narrowed by ZE_AFFINITY_MASK when one is given.
int count_intel_xpus(const std::string& drm_dir, const std::optional<std::string>& affinity_mask);

}  // namespace trainrun::launch
