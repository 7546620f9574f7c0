#pragma once

#include "config.hpp"

namespace trainrun::launch {

// How many workers this node runs for `count`: the number itself, or what the node has, counted
// now. cpu: the CPUs this process may run on. gpu: the NVIDIA GPUs it may use, without linking
// CUDA (CUDA_VISIBLE_DEVICES when set, else the driver's /proc/driver/nvidia/gpus entries, else
// `nvidia-smi -L`); throws UsageError when there are none. auto: the GPUs, or else the CPUs.
int resolve_worker_count(const WorkerCount& count);

}  // namespace trainrun::launch
