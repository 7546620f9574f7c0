#pragma once

#include <optional>
#include <string>

#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// Where this node's workers sit in the job, as decided by the rendezvous.
struct Topology {
  int group_rank = 0;
  int group_world_size = 1;
  int base_rank = 0;  // global rank of this node's local rank 0
  int local_world_size = 1;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
};

// The variable that names the file a worker touches to say it makes progress (the C++ runtime's
// report() does); set only with --hang-timeout.
inline constexpr char kHeartbeatFileVariable[] = "TRAINRUN_HEARTBEAT_FILE";

// What every worker of this node shares, beyond the topology.
// A PyTorch release's major and minor version ("2.15.0+cu132": 2, 15).
struct TorchVersion {
  int major = 0;
  int minor = 0;
  bool at_least(int major_, int minor_) const {
    return major > major_ || (major == major_ && minor >= minor_);
  }
};

struct JobSettings {
  std::string role = "default";
  std::string run_id = "none";
  int max_restarts = 0;
  bool use_agent_store = false;
  std::string signals_to_handle = kTorchrunSignalsToHandle;
  // torchrun's --virtual-local-rank: LOCAL_RANK=0 and only the worker's own GPU visible.
  bool virtual_local_rank = false;
  // The workers run a Python interpreter (runs_python): their torch version is asked.
  bool python_workers = false;
  // The workers may use NCCL (an NVIDIA GPU is visible): the flight recorder's variables are set.
  bool may_use_nccl = false;
  // The version of the workers' PyTorch when trainrun could ask (Python workers): 1.x gets
  // torchrun 1.13's NCCL_ASYNC_ERROR_HANDLING, which torch 2.x warns about in every process; 2.8
  // and later read the flight recorder's TORCH_FR_ names and warn about the TORCH_NCCL_ ones.
  std::optional<TorchVersion> torch;
  // --hang-timeout: the file whose time says progress (TRAINRUN_HEARTBEAT_FILE). Python workers
  // run with -u (as torchrun's): a line they print reaches trainrun when printed.
  std::string heartbeat_file;
};

}  // namespace trainrun::launch
