#include "watchdog.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <set>

namespace trainrun::launch {

namespace {

constexpr int kGoodbye = 0;

[[noreturn]] void watchdog_main(int read_fd) {
  // Stay out of the launcher's process group and ignore terminal and job-control signals: the
  // watchdog must live until the launcher is gone, however the launcher is stopped.
  setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN,
                  SIGTTOU})
    signal(sig, SIG_IGN);
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (devnull > 2) close(devnull);
  }
  std::set<pid_t> groups;
  while (true) {
    int value;
    ssize_t n = read(read_fd, &value, sizeof value);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof value)) break;  // the launcher is gone
    if (value == kGoodbye) _exit(0);
    if (value > 0)
      groups.insert(value);
    else
      groups.erase(-value);
  }
  for (pid_t pgid : groups) kill(-pgid, SIGKILL);
  _exit(0);
}

}  // namespace

bool Watchdog::start() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  // Double fork: the watchdog is not our child, so "no children left" stays a cheap question
  // (waitid) for the launcher, and the watchdog never shows up among the workers' leftovers.
  pid_t middle = fork();
  if (middle < 0) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  if (middle == 0) {
    close(fds[1]);
    pid_t pid = fork();
    if (pid == 0) watchdog_main(fds[0]);
    _exit(pid < 0 ? 1 : 0);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    close(fds[1]);
    return false;
  }
  fd_ = fds[1];
  return true;
}

void Watchdog::send(int value) {
  if (fd_ < 0) return;
  ssize_t n;
  do {
    n = write(fd_, &value, sizeof value);
  } while (n < 0 && errno == EINTR);
}

void Watchdog::add_group(pid_t pgid) { send(static_cast<int>(pgid)); }
void Watchdog::remove_group(pid_t pgid) { send(-static_cast<int>(pgid)); }

void Watchdog::dismiss() {
  send(kGoodbye);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace trainrun::launch
