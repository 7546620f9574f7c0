#include "trainrun/stacks/proc.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"

namespace trainrun::stacks {

// Generated from <sys/syscall.h> (lib/stacks/CMakeLists.txt).
extern const std::pair<long, const char*> kSyscallNames[];
extern const unsigned long kSyscallNameCount;

namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The value of "Name:\tvalue" in a /proc status file.
std::string status_field(const std::string& status, const std::string& name) {
  const std::string key = name + ":";
  std::istringstream in(status);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const auto start = line.find_first_not_of(" \t", key.size());
    return start == std::string::npos ? std::string{} : line.substr(start);
  }
  return {};
}

}  // namespace

std::string syscall_name(long number) {
  static const std::unordered_map<long, std::string> names = [] {
    std::unordered_map<long, std::string> m;
    for (unsigned long i = 0; i < kSyscallNameCount; ++i)
      m.emplace(kSyscallNames[i].first, kSyscallNames[i].second);
    return m;
  }();
  const auto it = names.find(number);
  if (it != names.end() && !it->second.empty()) return it->second;
  return "syscall " + std::to_string(number);
}

std::string describe_syscall_line(const std::string& line) {
  const std::string first = line.substr(0, line.find_first_of(" \n"));
  if (first.empty()) return {};
  if (first == "running") return "running";
  const auto number = parse_integer(first);
  if (!number) return first;
  // -1: blocked, but not in a system call (a page fault, a stop).
  if (*number < 0) return "none";
  return syscall_name(static_cast<long>(*number));
}

std::vector<Thread> read_proc_threads(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid) + "/task";
  std::vector<Thread> threads;
  DIR* dir = ::opendir(base.c_str());
  if (!dir) return threads;
  while (dirent* entry = ::readdir(dir)) {
    const auto tid = parse_integer(entry->d_name);
    if (!tid || *tid <= 0) continue;
    Thread t;
    t.tid = static_cast<long>(*tid);
    const std::string task = base + "/" + entry->d_name;
    t.name = first_line(read_small_file(task + "/comm"));
    t.state = status_field(read_small_file(task + "/status"), "State");
    t.wchan = first_line(read_small_file(task + "/wchan"));
    if (t.wchan == "0") t.wchan.clear();
    t.syscall = describe_syscall_line(read_small_file(task + "/syscall"));
    threads.push_back(std::move(t));
  }
  ::closedir(dir);
  std::sort(threads.begin(), threads.end(), [pid](const Thread& a, const Thread& b) {
    if ((a.tid == pid) != (b.tid == pid)) return a.tid == pid;
    return a.tid < b.tid;
  });
  return threads;
}

std::optional<ProcessState> read_process_state(pid_t pid) {
  const std::string status = read_small_file("/proc/" + std::to_string(pid) + "/status");
  if (status.empty()) return std::nullopt;
  ProcessState s;
  const std::string state = status_field(status, "State");
  if (!state.empty()) s.state = state[0];
  if (auto tracer = parse_integer(status_field(status, "TracerPid")))
    s.tracer = static_cast<pid_t>(*tracer);
  return s;
}

bool is_python_process(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  char target[4096];
  const ssize_t n = ::readlink((proc + "/exe").c_str(), target, sizeof target - 1);
  // Another user's process hides its executable, not its command line.
  const std::string exe = n > 0 ? std::string(target, static_cast<std::size_t>(n))
                                : read_small_file(proc + "/cmdline").c_str();
  if (exe.substr(exe.rfind('/') + 1).rfind("python", 0) == 0) return true;
  // An interpreter embedded in another program (uwsgi, a C++ host) maps libpython.
  return read_small_file(proc + "/maps").find("/libpython") != std::string::npos;
}

}  // namespace trainrun::stacks
