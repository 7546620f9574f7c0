#include "gpu_count.hpp"

#include <dirent.h>

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

}  // namespace

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

}  // namespace trainrun::launch
