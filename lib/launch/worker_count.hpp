#pragma once

#include <optional>
#include <string>

#include "config.hpp"

namespace trainrun::launch {

// How many workers this node runs for `count`: the number itself, or what the node has, counted
// now. cpu: the CPUs this process may run on. gpu: the NVIDIA GPUs it may use, without linking
// CUDA (CUDA_VISIBLE_DEVICES when set, else the driver's /proc/driver/nvidia/gpus entries, else
// `nvidia-smi -L`); throws UsageError when there are none. xpu: the Intel GPUs, counted as
// count_intel_xpus does; throws UsageError when there are none. auto: the NVIDIA GPUs, else the
// Intel ones, else the CPUs.
int resolve_worker_count(const WorkerCount& count);

// The Intel GPUs under `drm_dir` (/sys/class/drm): render nodes whose PCI vendor is 0x8086, as
// Level Zero would list them to torch.xpu, narrowed by ZE_AFFINITY_MASK when one is given.
int count_intel_xpus(const std::string& drm_dir, const std::optional<std::string>& affinity_mask);

}  // namespace trainrun::launch
