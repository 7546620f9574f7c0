#include "worker_count.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace trainrun::launch {

namespace {

int count_driver_entries() {
  DIR* dir = opendir("/proc/driver/nvidia/gpus");
  if (!dir) return -1;
  int n = 0;
  while (dirent* e = readdir(dir))
    if (e->d_name[0] != '.') ++n;
  closedir(dir);
  return n;
}

int count_nvidia_smi() {
  FILE* pipe = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!pipe) return 0;
  int n = 0;
  char line[512];
  while (fgets(line, sizeof line, pipe))
    if (std::strncmp(line, "GPU ", 4) == 0) ++n;
  pclose(pipe);
  return n;
}

int count_nvidia_gpus() {
  int devices = count_driver_entries();
  if (devices < 0) devices = count_nvidia_smi();
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty() || v == "-1") return 0;
    int listed = 1;
    for (char c : v) listed += c == ',';
    return devices > 0 && listed > devices ? devices : (devices > 0 ? listed : 0);
  }
  return devices;
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

}  // namespace

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
    case WorkerCount::Kind::automatic: {
      const int gpus = count_nvidia_gpus();
      return gpus > 0 ? gpus : count_usable_cpus();
    }
  }
  return count.number;
}

}  // namespace trainrun::launch
