#include "trainrun/launch/workers/watchdog.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "cgroup.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/base/processes.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/file_io.hpp"

extern char** environ;

namespace trainrun::launch {

namespace {

constexpr int kGoodbye = 0;
// Each followed by an int length and that many bytes: the environment marker, the job's cgroup,
// the job's log tree.
constexpr int kMarker = INT_MIN;
constexpr int kCgroup = INT_MIN + 1;
constexpr int kLogTree = INT_MIN + 2;
constexpr int kMaxString = 64 * 1024;

// Whether the environment of `pid` holds an entry starting with `marker`.
bool carries_marker(pid_t pid, const std::string& marker) {
  const auto environment = read_file("/proc/" + std::to_string(pid) + "/environ");
  if (!environment) return false;  // gone, or another user's
  const std::string& buffer = *environment;
  for (size_t at = 0; at < buffer.size();) {
    if (buffer.compare(at, marker.size(), marker) == 0) return true;
    const size_t end = buffer.find('\0', at);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
}

// SIGKILLs every process but this one whose environment carries `marker`, until a pass finds
// none (a process may be forking while the first pass runs). Bounded: a pass that kills only
// processes already killed before makes no progress.
void kill_marked(const std::string& marker) {
  std::set<pid_t> killed;
  for (int pass = 0; pass < 20; ++pass) {
    bool found_new = false;
    for (pid_t pid : process_ids()) {
      if (pid <= 1 || pid == getpid()) continue;
      if (!carries_marker(pid, marker)) continue;
      kill(pid, SIGKILL);
      found_new |= killed.insert(pid).second;
    }
    if (!found_new) return;
  }
}

// Reads an int length and that many bytes into `out`.
bool read_string(int fd, std::string& out) {
  int size = 0;
  if (!read_exactly(fd, &size, sizeof size) || size < 0 || size > kMaxString) return false;
  out.assign(static_cast<size_t>(size), '\0');
  return read_exactly(fd, out.data(), out.size());
}

[[noreturn]] void watchdog_main(int read_fd) {
  // Stay out of the launcher's process group and ignore terminal and job-control signals: the
  // watchdog must live until the launcher is gone, however the launcher is stopped.
  setpgid(0, 0);
  // A launcher started with stdin, stdout or stderr closed may have given the pipe one of their
  // numbers: move it out of the way of /dev/null, or the watchdog would read an end at once.
  if (read_fd <= 2) {
    const int moved = fcntl(read_fd, F_DUPFD_CLOEXEC, 3);
    if (moved >= 0) {
      close(read_fd);
      read_fd = moved;
    }
  }
  // A trainrun started inside another job's worker inherits that job's marker; the enclosing
  // job's watchdog must not take this one for an escaped worker, or this job's own escaped
  // processes would be left behind. /proc/<pid>/environ shows the original environment block,
  // so the entry is renamed in place.
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    if (std::string_view(*entry).substr(0, kJobMarkerEntry.size()) == kJobMarkerEntry) {
      (*entry)[0] = '_';
    }
  }
  for (int sig :
       {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU})
    signal(sig, SIG_IGN);
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (devnull > 2) close(devnull);
  }
  std::set<pid_t> groups;
  std::string marker, cgroup, log_tree;
  while (true) {
    int value;
    if (!read_exactly(read_fd, &value, sizeof value)) break;  // the launcher is gone
    if (value == kGoodbye) _exit(0);
    if (value == kMarker || value == kCgroup || value == kLogTree) {
      std::string& text = value == kMarker ? marker : value == kCgroup ? cgroup : log_tree;
      if (!read_string(read_fd, text)) break;
    } else if (value > 0) {
      groups.insert(value);
    } else {
      groups.erase(-value);
    }
  }
  for (pid_t pgid : groups) kill(-pgid, SIGKILL);
  if (!cgroup.empty()) kill_and_remove_cgroup(cgroup);
  if (!marker.empty()) kill_marked(marker);
  // What the launcher removes at its end when no file was written there (a tree of empty
  // directories under $TMPDIR, most often): a killed launcher must not leave it behind either.
  if (!log_tree.empty()) remove_empty_tree(log_tree);
  _exit(0);
}

}  // namespace

bool Watchdog::start() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  // Double fork: the watchdog is not our child, so "no children left" stays a cheap question
  // (waitid) for the launcher, and the watchdog never shows up among the workers' leftovers.
  auto watchdog = [&fds]() -> int { watchdog_main(fds[0]); };
  auto middle_body = [&]() {
    close(fds[1]);
    return run_in_child(watchdog) < 0 ? 1 : 0;
  };
  const pid_t middle = run_in_child(middle_body);
  if (middle < 0) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  close(fds[0]);
  const auto status = wait_for_exit(middle);
  if (!status || status->failed()) {
    close(fds[1]);
    return false;
  }
  fd_ = fds[1];
  return true;
}

void Watchdog::send(int value) {
  if (fd_ >= 0) write_all(fd_, reinterpret_cast<const char*>(&value), sizeof value);
}

void Watchdog::send_string(int tag, const std::string& text) {
  if (fd_ < 0 || text.size() > kMaxString) return;
  std::string message(2 * sizeof(int) + text.size(), '\0');
  const int header[2] = {tag, static_cast<int>(text.size())};
  std::memcpy(message.data(), header, sizeof header);
  std::memcpy(message.data() + sizeof header, text.data(), text.size());
  write_all(fd_, message.data(), message.size());
}

void Watchdog::mark_job_directory(const std::string& run_dir) {
  send_string(kMarker, std::string(kJobMarkerEntry) + run_dir + "/");
}

void Watchdog::set_cgroup(const std::string& path) { send_string(kCgroup, path); }

void Watchdog::set_log_tree(const std::string& path) { send_string(kLogTree, path); }

void Watchdog::add_group(pid_t pgid) { send(static_cast<int>(pgid)); }
void Watchdog::remove_group(pid_t pgid) { send(-static_cast<int>(pgid)); }

void Watchdog::dismiss() {
  send(kGoodbye);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace trainrun::launch
