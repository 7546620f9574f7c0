#include "proc.hpp"

#include <dirent.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
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

// Reads `size` bytes at `address` of process `pid` (its parent, or root, may).
bool read_memory(pid_t pid, std::uint64_t address, void* out, std::size_t size) {
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)), size};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

// The descriptors a thread blocked in a read, select or poll waits to read, from its
// /proc/PID/task/TID/syscall line ("NUMBER ARG1 ARG2 ... SP PC"); empty for any other call.
std::vector<int> descriptors_read(pid_t pid, const std::string& line) {
  std::istringstream in(line);
  long number = -1;
  in >> number;
  std::uint64_t args[6] = {};
  for (auto& a : args) in >> std::hex >> a;
  if (!in) return {};
  std::vector<int> fds;
  switch (number) {
    case SYS_read:
    case SYS_readv:
      fds.push_back(static_cast<int>(args[0]));
      break;
#ifdef SYS_select
    case SYS_select:
#endif
    case SYS_pselect6: {
      // The first 64 descriptors of the read set are enough for a terminal's (0, 1, 2, ...).
      std::uint64_t set = 0;
      if (args[0] > 0 && args[1] != 0 && read_memory(pid, args[1], &set, sizeof set))
        for (int fd = 0; fd < 64 && static_cast<std::uint64_t>(fd) < args[0]; ++fd)
          if (set & (std::uint64_t{1} << fd)) fds.push_back(fd);
      break;
    }
#ifdef SYS_poll
    case SYS_poll:
#endif
    case SYS_ppoll: {
      pollfd polled[16];
      const std::size_t n = std::min<std::uint64_t>(args[1], 16);
      if (n > 0 && read_memory(pid, args[0], polled, n * sizeof(pollfd)))
        for (std::size_t i = 0; i < n; ++i)
          if (polled[i].fd >= 0 && (polled[i].events & POLLIN)) fds.push_back(polled[i].fd);
      break;
    }
    default:
      break;
  }
  return fds;
}

bool is_terminal_path(const std::string& path) {
  return path.rfind("/dev/pts/", 0) == 0 || path.rfind("/dev/tty", 0) == 0 ||
         path == "/dev/console";
}

}  // namespace

std::optional<double> process_cpu_seconds(pid_t pid) {
  const std::string stat = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  // "PID (COMM) STATE PPID ...": the name may hold spaces and parentheses, the last ')' ends it;
  // utime and stime are fields 14 and 15, the 12th and 13th after it.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(stat.substr(close + 1));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 0; i < 11; ++i) in >> field;
  if (!(in >> utime >> stime)) return std::nullopt;
  static const long ticks = ::sysconf(_SC_CLK_TCK);
  return static_cast<double>(utime + stime) / static_cast<double>(ticks > 0 ? ticks : 100);
}

std::string terminal_input(pid_t pid) {
  const std::string p = "/proc/" + std::to_string(pid);
  const std::string line = read_small_file(p + "/task/" + std::to_string(pid) + "/syscall");
  for (const int fd : descriptors_read(pid, line)) {
    char target[256];
    const std::string link = p + "/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string path(target, static_cast<std::size_t>(n));
    if (is_terminal_path(path)) return path;
  }
  return {};
}

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
