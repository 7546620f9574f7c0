#include "cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "trainrun/base/files.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

namespace {

std::string read_text(const char* path) { return read_file(path).value_or(""); }

}  // namespace

std::optional<CgroupDirectory> find_cgroup_directory(const std::string& proc_cgroup,
                                                     const std::string& mountinfo,
                                                     const std::string& controller) {
  // hierarchy-id:controllers:path; cgroup v2's has no controllers ("0::/a/b").
  auto names = [&](const std::string& list) {
    return ("," + list + ",").find("," + controller + ",") != std::string::npos;
  };
  std::istringstream cgroups(proc_cgroup);
  std::string line, own;
  while (std::getline(cgroups, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string list = line.substr(first + 1, second - first - 1);
    if (controller.empty() ? line.rfind("0::", 0) == 0 : names(list)) own = line.substr(second + 1);
  }
  if (own.empty() || own.find(" (deleted)") != std::string::npos) return std::nullopt;
  std::istringstream mounts(mountinfo);
  while (std::getline(mounts, line)) {
    // id parent major:minor root mount-point options [optional fields] - type source options
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string type, source, options;
    if (!(after >> type >> source >> options)) continue;
    if (controller.empty() ? type != "cgroup2" : type != "cgroup" || !names(options)) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device, root, mount_point;
    if (!(fields >> id >> parent >> device >> root >> mount_point)) continue;
    if (root == "/") return CgroupDirectory{mount_point, own == "/" ? "" : own};
    if (own == root) return CgroupDirectory{mount_point, ""};
    if (own.rfind(root + "/", 0) == 0) return CgroupDirectory{mount_point, own.substr(root.size())};
  }
  return std::nullopt;
}

PidsLimit own_pids_limit() {
  const std::string proc_cgroup = read_text("/proc/self/cgroup");
  const std::string mountinfo = read_text("/proc/self/mountinfo");
  PidsLimit tightest;
  // cgroup v2, else cgroup v1's pids controller; in either, every cgroup up to the root seen
  // here counts this process's tasks against its own pids.max.
  for (const char* controller : {"", "pids"}) {
    std::optional<CgroupDirectory> at = find_cgroup_directory(proc_cgroup, mountinfo, controller);
    while (at) {
      const std::string file = at->path() + "/pids.max";
      // "max": no limit of its own.
      const std::optional<long long> max = read_positive_integer(file);
      if (max && (tightest.max == 0 || *max < tightest.max)) tightest = PidsLimit{*max, file};
      if (at->relative.empty()) break;
      at->relative.erase(at->relative.rfind('/'));
    }
    if (tightest.max > 0) break;
  }
  return tightest;
}

namespace {

// How long removing a cgroup waits for the processes it killed to be gone.
constexpr auto kEmptyWait = std::chrono::seconds(5);

// The directory of this process's cgroup v2.
std::optional<std::string> own_cgroup_directory() {
  const auto directory =
      find_cgroup_directory(read_text("/proc/self/cgroup"), read_text("/proc/self/mountinfo"), "");
  if (!directory) return std::nullopt;
  return directory->path();
}

std::vector<pid_t> processes_in(const std::string& path) {
  std::istringstream procs(read_file(path + "/cgroup.procs").value_or(""));
  std::vector<pid_t> out;
  std::string line;
  while (std::getline(procs, line)) {
    if (auto pid = parse_integer(line); pid && *pid > 0) out.push_back(static_cast<pid_t>(*pid));
  }
  return out;
}

bool populated_at(const std::string& path) {
  std::istringstream events(read_file(path + "/cgroup.events").value_or(""));
  std::string key;
  int value = 0;
  while (events >> key >> value) {
    if (key == "populated") return value != 0;
  }
  return !processes_in(path).empty();  // a kernel without cgroup.events
}

void kill_at(const std::string& path) {
  const int fd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    const bool done = write_all(fd, "1", 1);
    ::close(fd);
    if (done) return;
  }
  for (pid_t pid : processes_in(path)) ::kill(pid, SIGKILL);
}

std::vector<std::string> children_of(const std::string& path) {
  std::vector<std::string> out;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    const std::string_view name = e->d_name;
    if (e->d_type == DT_DIR && name != "." && name != "..") out.push_back(path + "/" + e->d_name);
  }
  closedir(dir);
  return out;
}

// Removes `path` and the cgroups below it (a nested trainrun's, left behind when it was killed);
// each is empty once its processes are gone.
void remove_tree(const std::string& path, std::chrono::steady_clock::time_point deadline) {
  for (const std::string& child : children_of(path)) remove_tree(child, deadline);
  while (::rmdir(path.c_str()) != 0 && errno == EBUSY &&
         std::chrono::steady_clock::now() < deadline) {
    kill_at(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::unique_ptr<JobCgroup> JobCgroup::create() {
  const char* wanted = std::getenv("TRAINRUN_CGROUP");
  if (wanted != nullptr && std::string_view(wanted) == "0") return nullptr;
  const std::optional<std::string> own = own_cgroup_directory();
  if (!own) return nullptr;
  const std::string path =
      *own + "/trainrun-" + std::to_string(::getpid()) + "-" + trainrun::random_hex(8);
  if (::mkdir(path.c_str(), 0755) != 0) return nullptr;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    ::rmdir(path.c_str());
    return nullptr;
  }
  return std::unique_ptr<JobCgroup>(new JobCgroup(path, fd));
}

JobCgroup::~JobCgroup() {
  ::close(fd_);
  kill_and_remove_cgroup(path_);
}

void JobCgroup::signal(int sig) const {
  if (sig == SIGKILL) return kill_at(path_);
  for (pid_t pid : processes_in(path_)) ::kill(pid, sig);
}

bool JobCgroup::populated() const { return populated_at(path_); }

void kill_and_remove_cgroup(const std::string& path) {
  kill_at(path);
  remove_tree(path, std::chrono::steady_clock::now() + kEmptyWait);
}

}  // namespace trainrun::launch
