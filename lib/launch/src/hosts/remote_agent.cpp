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

#include "hosts_plan.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/version.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"

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
  const bool here = python.find('/') == std::string::npos || is_executable_file(python);
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

int take_launcher_channel() {
  const std::string ready = std::string(kReadyLine) + "\n";
  write_all(STDOUT_FILENO, ready.data(), ready.size());
  const int channel = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (channel < 0 || null < 0)
    throw SetupError(
        fmt::format("--remote-agent: cannot set standard input aside: {}", std::strerror(errno)));
  ::dup2(null, STDIN_FILENO);
  ::close(null);
  return channel;
}

LauncherWatch::LauncherWatch(boost::asio::io_context& io, int channel,
                             std::vector<int> stop_signals, Lost lost)
    : channel_(io, channel),
      silence_(io),
      stop_signals_(std::move(stop_signals)),
      lost_(std::move(lost)),
      signal_(stop_signals_.empty() ? SIGTERM : stop_signals_.front()) {
  arm();
  read();
}

void LauncherWatch::cancel() {
  done_ = true;
  boost::system::error_code ignored;
  channel_.cancel(ignored);
  silence_.cancel();
}

void LauncherWatch::arm() {
  silence_.expires_after(std::chrono::seconds(kLauncherTimeoutSeconds));
  silence_.async_wait([this](boost::system::error_code ec) {
    if (!ec) stop();  // no heartbeat: the launcher is cut off
  });
}

void LauncherWatch::read() {
  channel_.async_read_some(boost::asio::buffer(buffer_), [this](boost::system::error_code ec,
                                                                std::size_t n) {
    if (done_ || ec == boost::asio::error::operation_aborted) return;
    if (ec) return stop();  // the launcher stopped the job, or ssh lost the connection
    for (std::size_t i = 0; i < n; ++i) {
      if (buffer_[i] != '\n') {
        if (line_.size() < 64) line_ += buffer_[i];
        continue;
      }
      // The launcher's own stop signal, where this agent stops on it too.
      if (auto sig = stop_signal_of(line_);
          sig && std::find(stop_signals_.begin(), stop_signals_.end(), *sig) != stop_signals_.end())
        signal_ = *sig;
      line_.clear();
    }
    arm();
    read();
  });
}

void LauncherWatch::stop() {
  if (done_) return;
  cancel();
  lost_(signal_);
}

}  // namespace trainrun::launch
