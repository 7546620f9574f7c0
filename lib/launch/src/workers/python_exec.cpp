#include "trainrun/launch/workers/python_exec.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "trainrun/base/text.hpp"

extern char** environ;

namespace trainrun::launch {

namespace {

// An interpreter that takes longer than this to say its version is not asked again.
constexpr auto kVersionTimeout = std::chrono::seconds(5);

// What `program --version` writes (stdout and stderr: Python 2 used the latter), bounded.
std::string version_output(const std::string& program) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, p[1], 1);
  posix_spawn_file_actions_adddup2(&actions, p[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // trainrun blocks the signals it waits for; the interpreter must not inherit that.
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  // In a group of its own: a wrapper script that does not answer is stopped with what it started.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::string arg0 = program;
  std::string arg1 = "--version";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(p[1]);
  std::string out;
  if (spawned != 0) {
    ::close(p[0]);
    return out;
  }
  const auto deadline = std::chrono::steady_clock::now() + kVersionTimeout;
  char buf[256];
  while (out.size() < 4096) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd fd{p[0], POLLIN, 0};
    const int ready = ::poll(&fd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  ::kill(-pid, SIGKILL);  // harmless for one that has exited: it is not reaped yet
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return out;
}

}  // namespace

std::string python_version(const std::string& program) {
  const std::string out = version_output(program);
  const std::string prefix = "Python ";
  if (out.rfind(prefix, 0) != 0) return "";
  return trim(escape_control(out.substr(prefix.size(), out.find('\n') - prefix.size())));
}

std::string python_line(const PythonExec& python) {
  return fmt::format(
      "Python workers run {} ({}; {})", python.program,
      python.version.empty() ? "version unknown" : "Python " + python.version,
      python.from_variable ? "from PYTHON_EXEC" : "python3 from PATH, PYTHON_EXEC unset");
}

std::optional<int> rank_without_torch(const std::vector<ProcessFailure>& failures) {
  const std::string needle = "No module named 'torch'";
  for (const auto& f : failures)
    for (const std::string* text : {&f.stderr_tail, &f.message, &f.traceback})
      if (text->find(needle) != std::string::npos) return f.rank;
  return std::nullopt;
}

std::string missing_torch_hint(int rank, const PythonExec& python) {
  std::string which = python.program;
  if (!python.version.empty()) which += ", " + python.version;
  if (python.from_variable) which += ", from PYTHON_EXEC";
  return fmt::format(
      "rank {}'s Python ({}) has no module torch: set PYTHON_EXEC to the python of your "
      "environment, or activate it",
      rank, which);
}

}  // namespace trainrun::launch
