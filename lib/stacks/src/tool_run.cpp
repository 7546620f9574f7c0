#include "trainrun/stacks/tool_run.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <thread>

#include "trainrun/base/process.hpp"
#include "trainrun/base/reaper.hpp"
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

// The launcher's environment for the tool, without DEBUGINFOD_URLS: gdb and eu-stack would fetch
// debug information over the network for every library, well past any timeout.
std::vector<std::string> tool_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (std::string_view(*e).rfind("DEBUGINFOD_URLS=", 0) != 0) env.emplace_back(*e);
  return env;
}

// Waits (up to `deadline`) for the child to end without reaping it: the group id stays ours
// until we reap, so the kill of the group that follows cannot reach a stranger.
enum class Exit { exited, gone, still_running, stopped };
Exit wait_for_exit(pid_t pid, Clock::time_point deadline, const std::atomic<bool>* stop) {
  while (true) {
    if (reaper::has_ended(pid)) return Exit::exited;
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
  SpawnRequest request;
  request.program = program;
  request.argv.push_back(program);
  request.argv.insert(request.argv.end(), args.begin(), args.end());
  request.env = tool_environment();
  request.in = Stdio::null();
  request.out = Stdio::pipe();
  request.err = Stdio::pipe();
  // The launcher blocks and handles signals its own way; the tool starts as from a shell.
  request.group = SpawnRequest::Group::new_group;
  request.default_signals = all_signals();
  Child child = spawn(request);
  if (child.pid < 0) {
    run.error = child.pipe_failed
                    ? fmt::format("cannot make a pipe: {}", strerror(child.error))
                    : fmt::format("cannot run {}: {}", program, strerror(child.error));
    return run;
  }
  const pid_t pid = child.pid;
  Fd out_read(child.out), err_read(child.err);
  if (const int exec_errno = wait_for_exec(child)) {
    // It never ran: reaped here, so that no child is left behind for the caller.
    trainrun::wait_for_exit(pid);
    run.error = fmt::format("cannot run {}: {}", program, strerror(exec_errno));
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
  // SIGKILLed: the end is near; bounded all the same, for a tool stuck in the kernel.
  const auto reap_deadline = Clock::now() + std::chrono::seconds(2);
  reaper::Reaped reaped;
  while ((reaped = reaper::try_reap(pid)).state == reaper::Reaped::State::running) {
    if (Clock::now() >= reap_deadline) return run;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (reaped.state == reaper::Reaped::State::gone) return run;
  const ExitStatus end = reaped.status;
  if (end.signal == 0) run.exit_code = end.code;
  if (end.signal != 0 && !run.timed_out && !run.truncated && !run.stopped) run.signal = end.signal;
  return run;
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
