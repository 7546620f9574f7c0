#include "trainrun/launch/workers/worker_count.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cgroup.hpp"
#include "trainrun/base/files.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

namespace {

// The entries of `dir` whose name `counts`; -1 when it cannot be read.
template <typename Counts>
int count_entries(const std::string& dir, Counts counts) {
  DIR* d = opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.' && counts(std::string_view(e->d_name))) ++n;
  closedir(d);
  return n;
}

// nvidia0, nvidia1, ...: a GPU's device node (not nvidiactl, nvidia-uvm, nvidia-modeset).
bool gpu_device_node(std::string_view name) {
  if (name.size() <= 6 || name.substr(0, 6) != "nvidia") return false;
  return std::all_of(name.begin() + 6, name.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// ZE_AFFINITY_MASK narrows Level Zero's devices as CUDA_VISIBLE_DEVICES does CUDA's.
int count_visible_xpus() {
  const char* mask = std::getenv("ZE_AFFINITY_MASK");
  return count_intel_xpus("/sys/class/drm", mask ? std::optional<std::string>(mask) : std::nullopt);
}

int count_usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// A /proc/sys number; 0 (no bound known) when it cannot be read.
long long read_sysctl(const char* path) { return read_positive_integer(path).value_or(0); }

}  // namespace

int count_nvidia_devices(const std::string& dev_dir, const std::string& driver_dir) {
  const int nodes = count_entries(dev_dir, gpu_device_node);
  if (nodes > 0) return nodes;
  return std::max(0, count_entries(driver_dir, [](std::string_view) { return true; }));
}

int count_nvidia_gpus() {
  // Read once: the agent asks at the start (gpu, auto) and again for NCCL's variables.
  static const int devices = count_nvidia_devices("/dev", "/proc/driver/nvidia/gpus");
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty() || v == "-1") return 0;
    int listed = 1;
    for (char c : v) listed += c == ',';
    return devices > 0 && listed > devices ? devices : (devices > 0 ? listed : 0);
  }
  return devices;
}

ProcessLimits read_process_limits() {
  ProcessLimits limits;
  rlimit nproc{};
  if (::getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY)
    limits.rlimit_nproc = static_cast<long long>(nproc.rlim_cur);
  limits.pid_max = read_sysctl("/proc/sys/kernel/pid_max");
  limits.threads_max = read_sysctl("/proc/sys/kernel/threads-max");
  const PidsLimit pids = own_pids_limit();
  limits.pids_max = pids.max;
  limits.pids_max_file = pids.file;
  return limits;
}

void check_worker_bound(int workers, const ProcessLimits& limits, const std::string& what) {
  long long bound = rendezvous::kMaxNproc;
  std::vector<std::string> named = {fmt::format("the rendezvous protocol's {}", bound)};
  auto consider = [&](long long limit, const char* name) {
    if (limit <= 0) return;
    bound = std::min(bound, limit);
    named.push_back(fmt::format("{} {}", name, limit));
  };
  consider(limits.pid_max, "kernel.pid_max");
  consider(limits.threads_max, "kernel.threads-max");
  consider(limits.rlimit_nproc, "RLIMIT_NPROC");
  consider(limits.pids_max, "the cgroup's pids.max");
  if (workers <= bound) return;
  std::string list;
  for (size_t i = 0; i < named.size(); ++i)
    list += (i == 0 ? "" : i + 1 == named.size() ? " and " : ", ") + named[i];
  throw UsageError(fmt::format(
      "{}: more workers than one node can run: at most {} (each worker is a process; the "
      "smallest of {})",
      what, bound, list));
}

void check_worker_limits(const LaunchConfig& config, const ProcessLimits& limits) {
  const WorkerCount& count = config.nproc_per_node;
  if (count.kind != WorkerCount::Kind::number) return;
  check_worker_bound(
      count.number, limits,
      count.source.empty() ? fmt::format("{} workers per node", count.number) : count.source);
}

void check_machine_limits(const LaunchConfig& config) {
  check_worker_limits(config, read_process_limits());
}

std::string fork_failure(int local_rank, int error, const ProcessLimits& limits) {
  std::string line = fmt::format("cannot start worker {}: {}", local_rank, std::strerror(error));
  if (error != EAGAIN) return line;
  std::string named;
  if (limits.pids_max > 0)
    named = fmt::format("the cgroup's pids.max {} ({})", limits.pids_max, limits.pids_max_file);
  if (limits.rlimit_nproc > 0)
    named += fmt::format("{}RLIMIT_NPROC {} (ulimit -u)", named.empty() ? "" : " and ",
                         limits.rlimit_nproc);
  if (named.empty()) named = "kernel.pid_max and kernel.threads-max";
  return fmt::format("{}: processes here are limited by {}; start fewer workers or raise the limit",
                     line, named);
}

int count_intel_xpus(const std::string& drm_dir, const std::optional<std::string>& affinity_mask) {
  int devices = 0;
  if (DIR* dir = opendir(drm_dir.c_str())) {
    while (dirent* e = readdir(dir)) {
      if (std::strncmp(e->d_name, "renderD", 7) != 0) continue;
      const std::string id = read_first_word(drm_dir + "/" + e->d_name + "/device/vendor");
      if (id == "0x8086" || id == "0X8086") ++devices;
    }
    closedir(dir);
  }
  if (!affinity_mask || affinity_mask->empty() || devices == 0) return devices;
  // Sub-devices ("0.1") count as the device they belong to.
  std::set<std::string> listed;
  std::stringstream items(*affinity_mask);
  for (std::string item; std::getline(items, item, ',');)
    if (!item.empty()) listed.insert(item.substr(0, item.find('.')));
  return std::min(devices, static_cast<int>(listed.size()));
}

int resolve_worker_count(const WorkerCount& count) {
  switch (count.kind) {
    case WorkerCount::Kind::number:
      return count.number;
    case WorkerCount::Kind::cpu:
      return count_usable_cpus();
    case WorkerCount::Kind::gpu: {
      const int gpus = count_nvidia_gpus();
      if (gpus <= 0)
        throw UsageError(fmt::format("{}: no NVIDIA GPU found on this node; use an integer or cpu",
                                     count.source));
      return gpus;
    }
    case WorkerCount::Kind::xpu: {
      const int xpus = count_visible_xpus();
      if (xpus <= 0)
        throw UsageError(fmt::format(
            "{}: no Intel XPU found on this node; use an integer, cpu or gpu", count.source));
      return xpus;
    }
    case WorkerCount::Kind::automatic: {
      // The accelerator the node has, as torch.accelerator picks it; else the CPUs.
      const int gpus = count_nvidia_gpus();
      if (gpus > 0) return gpus;
      const int xpus = count_visible_xpus();
      return xpus > 0 ? xpus : count_usable_cpus();
    }
  }
  return count.number;
}

}  // namespace trainrun::launch
