#pragma once

namespace trainrun::launch {

// NVIDIA GPUs this process may use, without linking CUDA: CUDA_VISIBLE_DEVICES when set, else
// the driver's /proc/driver/nvidia/gpus entries, else `nvidia-smi -L`. 0 when there are none.
int count_nvidia_gpus();

}  // namespace trainrun::launch
