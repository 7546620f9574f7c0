#include "trainrun/stacks/tool_run.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <thread>

#include "trainrun/base/text.hpp"

extern char** environ;

namespace trainrun::stacks {

namespace {

using Clock = std::chrono::steady_clock;

// How often a tool's wait looks at its stop flag.
constexpr std::chrono::milliseconds kStopCheck{20};

bool stop_asked(const std::atomic<bool>* stop) { return stop && stop->load(); }

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

bool make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  // A launcher started with a standard descriptor closed gets a pipe there: the tool's own
  // descriptors 0-2, set up when it starts, would replace it.
  for (int& fd : fds) {
    if (fd > 2) continue;
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    fd = high;
  }
  read_end.fd = fds[0];
  write_end.fd = fds[1];
  return fds[0] >= 0 && fds[1] >= 0;
}

// The launcher's environment for the tool, without DEBUGINFOD_URLS: gdb and eu-stack would fetch
// debug information over the network for every library, well past any timeout.
std::vector<char*> tool_environment() {
  std::vector<char*> env;
  for (char** e = environ; e && *e; ++e)
    if (std::string_view(*e).rfind("DEBUGINFOD_URLS=", 0) != 0) env.push_back(*e);
  env.push_back(nullptr);
  return env;
}

// Waits (up to `deadline`) for the child to end without reaping it: the group id stays ours
// until we reap, so the kill of the group that follows cannot reach a stranger.
enum class Exit { exited, gone, still_running, stopped };
Exit wait_for_exit(pid_t pid, Clock::time_point deadline, const std::atomic<bool>* stop) {
  while (true) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      return Exit::gone;
    }
    if (info.si_pid == pid) return Exit::exited;
    if (Clock::now() >= deadline) return Exit::still_running;
    if (stop_asked(stop)) return Exit::stopped;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

ToolRun run_tool(const std::string& program, const std::vector<std::string>& args,
                 std::chrono::milliseconds timeout, std::size_t max_output,
                 const std::atomic<bool>* stop) {
  ToolRun run;
  if (stop_asked(stop)) {
    run.stopped = true;
    run.error = "not run: the stacks are no longer wanted";
    return run;
  }
  Fd out_read, out_write, err_read, err_write;
  if (!make_pipe(out_read, out_write) || !make_pipe(err_read, err_write)) {
    run.error = fmt::format("cannot make a pipe: {}", strerror(errno));
    return run;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp = tool_environment();

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.fd, 2);
  // The launcher blocks and handles signals its own way; the tool starts as from a shell.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int spawn_error =
      posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  out_write.reset();
  err_write.reset();
  if (spawn_error != 0) {
    run.error = fmt::format("cannot run {}: {}", program, strerror(spawn_error));
    return run;
  }
  run.started = true;

  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_read.fd, POLLIN, 0}, {err_read.fd, POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open_pipes = 2;
  char buffer[65536];
  while (open_pipes > 0 && !run.timed_out && !run.truncated && !run.stopped) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      run.timed_out = true;
      break;
    }
    if (stop_asked(stop)) {
      run.stopped = true;
      break;
    }
    if (stop) left = std::min<long long>(left, kStopCheck.count());
    const int ready = ::poll(fds, 2, static_cast<int>(left) + 1);
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      const std::size_t room = max_output - std::min(max_output, run.out.size() + run.err.size());
      sinks[i]->append(buffer, std::min(room, static_cast<std::size_t>(n)));
      if (static_cast<std::size_t>(n) > room) run.truncated = true;
    }
  }

  Exit exit = Exit::still_running;
  if (!run.timed_out && !run.truncated && !run.stopped) {
    // Both pipes closed: the tool is ending. Its exit is waited for within the same deadline.
    exit = wait_for_exit(pid, deadline, stop);
    if (exit == Exit::still_running) run.timed_out = true;
    if (exit == Exit::stopped) run.stopped = true;
  }
  // Whatever the tool left in its group (a helper it started) goes with it.
  ::kill(-pid, SIGKILL);
  if (exit == Exit::gone) return run;
  int status = 0;
  // SIGKILLed: the end is near; bounded all the same, for a tool stuck in the kernel.
  const auto reap_deadline = Clock::now() + std::chrono::seconds(2);
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return run;
    if (Clock::now() >= reap_deadline) return run;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !run.timed_out && !run.truncated && !run.stopped)
    run.signal = WTERMSIG(status);
  return run;
}

std::optional<std::string> find_program(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return name;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    // An empty entry is the current directory, as execvp reads it.
    std::string dir = end == start ? "." : path.substr(start, end - start);
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

std::string describe_failure(const std::string& tool, const ToolRun& run,
                             std::chrono::milliseconds timeout) {
  if (!run.started) return fmt::format("{}: {}", tool, run.error);
  if (run.stopped) return fmt::format("{} was stopped: the stacks are no longer wanted", tool);
  if (run.timed_out)
    return fmt::format("{} timed out after {:g} s", tool, timeout.count() / 1000.0);
  if (run.truncated) return fmt::format("{} printed more than the cap and was stopped", tool);
  std::string what;
  if (run.signal != 0)
    what = fmt::format("{} was killed by signal {} ({})", tool, run.signal, strsignal(run.signal));
  else if (run.exit_code >= 0)
    what = fmt::format("{} exited with status {}", tool, run.exit_code);
  else
    what = fmt::format("{} ended", tool);
  const std::string said = first_message(run.err);
  if (!said.empty()) what += ": " + said;
  return what;
}

std::string first_message(const std::string& text) {
  std::string_view err = text;
  std::string_view first;
  while (!err.empty()) {
    const auto nl = err.find('\n');
    std::string_view line = err.substr(0, nl);
    err = nl == std::string_view::npos ? std::string_view{} : err.substr(nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    if (first.empty()) first = line;
    if (line.find("rror") != std::string_view::npos ||
        line.find("ptrace") != std::string_view::npos) {
      first = line;
      break;
    }
  }
  return first.empty() ? std::string{} : escape_control(utf8_prefix(first, 300));
}

}  // namespace trainrun::stacks
