#include "test_support.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <vector>

namespace trainrun::test {

int free_port() {
  int low = 32768;
  int high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  std::vector<int> candidates;
  for (int port = 20000; port < 65535; ++port) {
    if (port < low || port > high) candidates.push_back(port);
  }
  std::shuffle(candidates.begin(), candidates.end(), std::mt19937(std::random_device{}()));
  for (int port : candidates) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (bound) return port;
  }
  throw std::runtime_error("free_port: no free port on 127.0.0.1 outside the ephemeral range");
}

namespace {

// Directories made by this test process, removed when it exits (never by a forked worker that
// happens to run exit handlers).
struct TempDirs {
  std::mutex mutex;
  std::vector<std::string> paths;
  pid_t owner = ::getpid();
};

TempDirs& temp_dirs() {
  static TempDirs* dirs = [] {
    auto* d = new TempDirs;
    std::atexit([] {
      TempDirs& t = temp_dirs();
      if (::getpid() != t.owner) return;
      std::error_code ignored;
      for (const auto& path : t.paths) std::filesystem::remove_all(path, ignored);
    });
    return d;
  }();
  return *dirs;
}

}  // namespace

std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/trainrun_" + tag + "_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("make_temp_dir: mkdtemp failed for " + pattern);
  }
  TempDirs& dirs = temp_dirs();
  std::lock_guard<std::mutex> lock(dirs.mutex);
  dirs.paths.push_back(pattern);
  return pattern;
}

}  // namespace trainrun::test
