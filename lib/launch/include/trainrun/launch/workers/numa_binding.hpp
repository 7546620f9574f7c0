#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainrun::launch {

// --numa-binding, as torchrun 2.x's (torch/numa/binding.py): worker i is bound to CPUs near GPU i
// of this node (the i-th GPU the workers may use), read from sysfs:
//   node          every allowed CPU of the GPU's NUMA node;
//   socket        those of every NUMA node of the GPU's socket;
//   exclusive     the node's physical cores split evenly among the node's GPUs, each worker its
//                 own share (whole cores, hyperthreads included);
//   core-complex  one group of cores sharing the last-level cache on the GPU's node, a different
//                 one for each of the node's GPUs while there are enough.
// "Allowed" is trainrun's own CPU affinity, as torchrun's. Where torchrun wraps the worker in
// `numactl --physcpubind`, trainrun sets the same affinity between fork and exec: no numactl.

// Something in sysfs that does not allow a binding: the file and what is wrong with it.
class NumaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "0-2,4" → {0, 1, 2, 4}, as sysfs writes CPU and node lists. Throws NumaError naming `what`.
std::set<int> parse_cpu_list(const std::string& text, const std::string& what);
// {0, 1, 2, 4} → "0-2,4".
std::string cpu_list_text(const std::set<int>& cpus);

// The PCI addresses of the NVIDIA GPUs the workers may use, in device order: every display or 3D
// controller of vendor 0x10de under SYSFS/bus/pci/devices, by address (nvidia-smi's order, and
// CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID), narrowed and reordered by a CUDA_VISIBLE_DEVICES
// of indices. Throws NumaError for a CUDA_VISIBLE_DEVICES that names GPUs otherwise (UUIDs, MIG
// instances), whose places sysfs does not tell.
std::vector<std::string> visible_gpu_addresses(const std::string& sysfs,
                                               const std::map<std::string, std::string>& env);

// The CPUs worker `device_index` is bound to in `mode` (node, socket, exclusive, core-complex),
// with `gpus` from visible_gpu_addresses and `allowed` trainrun's own affinity. Reads only
// files under `sysfs`. Throws NumaError naming the file or the reason.
std::set<int> numa_cpus(const std::string& sysfs, const std::string& mode, int device_index,
                        const std::vector<std::string>& gpus, const std::set<int>& allowed);

// The binding of each local rank of a node's `workers` in `mode`, and what to say of it: one
// warning where nothing is bound (no NVIDIA GPU here; sysfs that does not tell), one for the
// local ranks beyond the GPUs (not bound), and each worker's CPUs (for -v).
struct NumaPlan {
  std::vector<std::set<int>> cpus;  // by local rank; empty: not bound
  std::vector<std::string> warnings;
  std::vector<std::string> details;
};
NumaPlan plan_numa_binding(const std::string& mode, int workers, const std::string& sysfs,
                           const std::map<std::string, std::string>& env,
                           const std::set<int>& allowed);

// Where sysfs is: TRAINRUN_SYSFS_ROOT (for tests: a fake topology), else /sys.
std::string sysfs_root(const std::map<std::string, std::string>& env);

// The CPUs this process may run on (sched_getaffinity).
std::set<int> own_cpu_affinity();

}  // namespace trainrun::launch
