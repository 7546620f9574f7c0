#include "trainrun/launch/hosts/remote_agent.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/hosts/hosts_plan.hpp"
#include "trainrun/launch/version.hpp"

namespace trainrun::launch {

namespace {

constexpr auto kHandoverWait = std::chrono::seconds(30);
constexpr size_t kMaxHandoverBytes = 1 << 20;

// One line from standard input, byte by byte so that nothing after it is taken from the stream
// whose end later means "stop".
std::string read_handover_line() {
  const auto deadline = std::chrono::steady_clock::now() + kHandoverWait;
  std::string line;
  while (line.size() < kMaxHandoverBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0)
      throw UsageError(
          "--remote-agent: no handover on standard input within 30 s; this option is for the "
          "agents trainrun --hosts starts over ssh");
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw UsageError(
          "--remote-agent: standard input closed before the launcher's handover; the launching "
          "trainrun stopped or its connection was lost");
    if (c == '\n') return line;
    line += c;
  }
  throw UsageError("--remote-agent: the handover on standard input is too long");
}

}  // namespace

std::optional<RemoteAgent> take_remote_agent(std::vector<std::string>& args) {
  const std::string prefix = kRemoteAgentOption;
  if (args.empty() || args[0].rfind(prefix, 0) != 0) return std::nullopt;
  const std::string theirs = args[0].substr(prefix.size());
  if (theirs != kVersion)
    throw UsageError(fmt::format(
        "this host runs trainrun {}, the launching machine trainrun {}; install the same version "
        "on every host",
        kVersion, theirs));
  // Typed by hand, it would wait for a token nobody sends.
  if (::isatty(STDIN_FILENO))
    throw UsageError(
        "--remote-agent: standard input is a terminal; this option is for the agents trainrun "
        "--hosts starts over ssh (run trainrun --hosts HOST,... instead)");
  const Handover handover = decode_handover(read_handover_line());
  for (const auto& [name, value] : handover.env) ::setenv(name.c_str(), value.c_str(), 1);
  args.erase(args.begin());
  return RemoteAgent{handover.token, handover.python};
}

void use_launcher_python(LaunchConfig& config, const std::string& python, std::string* note) {
  if (python.empty() || config.entry_mode == EntryMode::executable ||
      config.python_source == PythonSource::variable)
    return;
  // A bare name is looked up on this host's PATH, as PYTHON_EXEC's would be.
  const bool here = python.find('/') == std::string::npos || ::access(python.c_str(), X_OK) == 0;
  if (here) {
    config.python_exec = python;
    config.python_source = PythonSource::launcher;
  } else {
    *note = fmt::format(
        "the launcher's Python {} is not on this host: its workers run this host's own choice "
        "(PYTHON_EXEC, the activated environment, trainrun's, or python3 on PATH); install the "
        "same environment at the same path, or -x PYTHON_EXEC",
        python);
  }
}

void watch_launcher(const std::vector<int>& stop_signals) {
  const std::string ready = std::string(kReadyLine) + "\n";
  write_all(STDOUT_FILENO, ready.data(), ready.size());
  // The launcher's channel is the agent's alone: the workers, which inherit standard input, get
  // /dev/null, so that none can take a heartbeat or a stop from it.
  const int channel = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (channel < 0 || null < 0)
    throw SetupError(
        fmt::format("--remote-agent: cannot set standard input aside: {}", std::strerror(errno)));
  ::dup2(null, STDIN_FILENO);
  ::close(null);
  // A thread of its own: the watch runs from the handover on, before the agent's loop exists
  // (the worker count, the Python inspection) and to its end; it shares nothing with the agent
  // but the signal it sends, which the agent takes on its loop as one from outside.
  std::thread([stop_signals, channel] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    int signal = stop_signals.empty() ? SIGTERM : stop_signals.front();
    std::string line;
    for (;;) {
      pollfd p{channel, POLLIN, 0};
      const int ready = ::poll(&p, 1, kLauncherTimeoutSeconds * 1000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;  // no heartbeat: the launcher is cut off
      char buffer[256];
      const ssize_t n = ::read(channel, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the launcher stopped the job, or ssh lost the connection
      for (ssize_t i = 0; i < n; ++i) {
        if (buffer[i] != '\n') {
          if (line.size() < 64) line += buffer[i];
          continue;
        }
        // The launcher's own stop signal, where this agent stops on it too.
        if (auto sig = stop_signal_of(line);
            sig && std::find(stop_signals.begin(), stop_signals.end(), *sig) != stop_signals.end())
          signal = *sig;
        line.clear();
      }
    }
    ::kill(::getpid(), signal);
  }).detach();
}

}  // namespace trainrun::launch
