#include "trainrun/launch/workers/warm_start.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "fork_request.hpp"
#include "python_bootstrap.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"
#include "trainrun/launch/workers/watchdog.hpp"

namespace trainrun::launch {

namespace {

std::string joined(const std::vector<std::string>& modules) {
  std::string text;
  for (const std::string& name : modules) text += (text.empty() ? "" : ",") + name;
  return text;
}

// How long a fork request may take: a template that does not answer by then is stuck.
constexpr int kReplyMilliseconds = 30'000;
// The largest reply the template sends (a line, a pid, an errno).
constexpr std::uint32_t kMaxReply = 64 * 1024;

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// Waits up to `milliseconds` for `fd` to be readable (or closed); false on timeout.
bool wait_readable(int fd, int milliseconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(milliseconds);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // the read that follows says what is wrong
  }
}

// Sends `data`, its first byte with `fds` (SCM_RIGHTS). False when the template is gone.
bool send_with_fds(int socket, const std::string& data, const std::vector<int>& fds) {
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  iovec iov{const_cast<char*>(data.data()), 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  ssize_t sent;
  do {
    sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != 1) return false;
  for (std::size_t at = 1; at < data.size();) {
    const ssize_t n = ::send(socket, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

std::string cannot_start(const std::string& program, int error) {
  return fmt::format(
      "--preload: cannot start the template interpreter {} ({}); workers start the ordinary way",
      program, std::strerror(error));
}

}  // namespace

void check_preload(const LaunchConfig& resolved) {
  if (resolved.preload.empty() || resolved.entry_mode != EntryMode::executable) return;
  const std::string given = "--preload=" + joined(resolved.preload);
  if (resolved.no_python)
    throw UsageError(fmt::format(
        "{}: --no-python runs the entrypoint itself, and --preload forks Python workers; drop "
        "one of them",
        given));
  throw UsageError(
      fmt::format("{}: {} is a program, not a Python script, and --preload forks Python workers "
                  "(a .py script or -m MODULE)",
                  given, resolved.entrypoint));
}

WarmStart::WarmStart(boost::asio::io_context& io, std::vector<std::string> modules,
                     Watchdog& watchdog, std::function<void(const std::string&)> say)
    : io_(io),
      modules_(std::move(modules)),
      watchdog_(watchdog),
      say_(std::move(say)),
      timer_(io) {}

WarmStart::~WarmStart() {
  then_ = nullptr;
  stop();
}

void WarmStart::prepare(const SpawnRequest& shared, const std::string& bootstrap_dir,
                        std::function<void()> then, std::chrono::milliseconds wait) {
  then_ = nullptr;
  timer_.cancel();
  if (off_ || modules_.empty()) return then();
  if (bootstrap_dir.empty() && pid_ < 0) {
    off_ = true;
    return then();
  }
  // An idle template sends nothing: a socket with something to read, or its end, is one it
  // closed in ending. A look, not a wait.
  char byte;
  if (pid_ > 0 && ready_ && ::recv(socket_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) {
    say_("--preload: the template interpreter ended; the next workers are forked from another");
    stop();
  }
  if (pid_ < 0 && !launch(shared, bootstrap_dir)) return then();
  if (ready_) return then();
  then_ = std::move(then);
  timer_.expires_after(wait);
  timer_.async_wait([this, wait](boost::system::error_code ec) {
    if (ec || !then_) return;
    say_(
        fmt::format("--preload: the template is still importing {} after {} s; these workers "
                    "start the ordinary way",
                    joined(modules_), wait.count() / 1000));
    go_on();
  });
}

void WarmStart::go_on() {
  timer_.cancel();
  if (auto then = std::exchange(then_, nullptr)) then();
}

bool WarmStart::launch(const SpawnRequest& shared, const std::string& bootstrap_dir) {
  int subreaper = 0;
  // A worker forked by the template's child comes back to us only if we are a subreaper.
  if (::prctl(PR_GET_CHILD_SUBREAPER, &subreaper) != 0 || subreaper == 0) {
    off_ = true;
    say_("--preload: trainrun is not a child subreaper here; workers start the ordinary way");
    return false;
  }
  const std::size_t end = python_options_end(shared.argv);
  if (end >= shared.argv.size() || !shared.env ||
      (shared.argv[end] == "-m" && end + 1 >= shared.argv.size())) {
    off_ = true;
    return false;
  }
  options_.assign(shared.argv.begin(), shared.argv.begin() + static_cast<std::ptrdiff_t>(end));
  command_.assign(
      shared.argv.begin() + static_cast<std::ptrdiff_t>(end),
      shared.argv.begin() + static_cast<std::ptrdiff_t>(end + (shared.argv[end] == "-m" ? 2 : 1)));
  program_ = shared.program;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    say_(fmt::format("--preload: no socket for the template ({}); workers start the ordinary way",
                     std::strerror(errno)));
    return false;
  }
  // Local rank 0's command line, the bootstrap in its environment: each worker forked shows
  // it in ps (and /proc/PID/cmdline), as it shows its own script.
  SpawnRequest request = shared;
  const nlohmann::json settings = {
      {"modules", modules_},
      {"prefix", end},
      {"marker", std::string(kJobMarkerEntry.substr(0, kJobMarkerEntry.size() - 1))}};
  request.env = bootstrap_environment(*shared.env, bootstrap_dir, {{"template", settings}});
  request.in = Stdio::from_fd(fds[1]);
  request.out = request.err = Stdio::inherit();
  // It is no worker: outside the job's cgroup (which the end of each attempt empties) and on
  // every CPU; each worker joins the one and binds itself as its own request says.
  request.cgroup_fd = -1;
  request.cpus.clear();
  Child child = spawn(request);
  ::close(fds[1]);
  if (child.pid <= 0) {
    ::close(fds[0]);
    say_(cannot_start(program_, child.error));
    return false;
  }
  pid_ = child.pid;
  socket_ = fds[0];
  // Not waited for: an exec that fails ends the template, which closes its socket (imported()).
  exec_report_ = child.exec_report;
  ready_ = false;
  // Its own session, which the watchdog kills if trainrun is killed (its death signal too).
  watchdog_.add_group(pid_);
  socket_watch_ = std::make_unique<boost::asio::posix::stream_descriptor>(io_, socket_);
  socket_watch_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                            [this, generation = ++generation_](boost::system::error_code ec) {
                              if (ec || generation != generation_) return;
                              imported();
                            });
  return true;
}

void WarmStart::imported() {
  char tag = 0;
  std::string text;
  if (read_reply(tag, text) && tag == 'R') {
    ready_ = true;
    close_exec_report();  // it runs Python: its exec worked
    if (!text.empty()) say_(text);
    go_on();
    return;
  }
  // Killed and reaped first: its exec report is then whole (an errno, or nothing at the exec).
  Child ended;
  ended.exec_report = std::exchange(exec_report_, -1);
  const auto status = stop();
  const int exec_errno = ended.exec_report >= 0 ? wait_for_exec(ended) : 0;
  say_(exec_errno != 0 ? cannot_start(program_, exec_errno)
                       : fmt::format("--preload: the template interpreter {} before its imports "
                                     "were done; workers start the ordinary way",
                                     status ? describe_exit(*status) : "ended"));
  go_on();
}

void WarmStart::close_exec_report() {
  if (exec_report_ >= 0) ::close(exec_report_);
  exec_report_ = -1;
}

std::optional<Child> WarmStart::start(const SpawnRequest& r, int local_rank) {
  // Only what the template can carry out: a worker's own environment, its interpreter and
  // options, and the template's own command (a script named after its rank is another program).
  if (!ready_ || off_ || pid_ < 0 || !r.env || r.program != program_ ||
      r.argv.size() < options_.size() + command_.size() ||
      !std::equal(options_.begin(), options_.end(), r.argv.begin()) ||
      !std::equal(command_.begin(), command_.end(),
                  r.argv.begin() + static_cast<std::ptrdiff_t>(options_.size())))
    return std::nullopt;
  std::optional<ForkRequest> request = fork_request(
      r, {::fcntl(0, F_GETFD) >= 0, ::fcntl(1, F_GETFD) >= 0, ::fcntl(2, F_GETFD) >= 0});
  if (!request) return std::nullopt;
  int report[2];
  if (!make_pipe(report)) {
    Child failed;
    failed.error = errno;
    failed.pipe_failed = true;
    return failed;
  }
  std::vector<int> fds = std::move(request->fds);
  fds.push_back(report[1]);
  std::string message;
  put_u32(message, static_cast<std::uint32_t>(request->json.size()));
  message += request->json;
  const bool sent = send_with_fds(socket_, message, fds);
  ::close(report[1]);
  char tag = 0;
  std::string text;
  if (!sent) {
    // Nothing was forked for a request the template did not take whole.
    ::close(report[0]);
    say_("--preload: the template interpreter ended; workers start the ordinary way");
    stop();
    return std::nullopt;
  }
  if (!read_reply(tag, text) || (tag != 'P' && tag != 'U' && tag != 'F')) {
    ::close(report[0]);
    stop();
    throw SpawnError(fmt::format(
        "--preload: the template interpreter ended while starting local rank {}", local_rank));
  }
  if (tag == 'U') {
    ::close(report[0]);
    say_(text);
    off_ = true;
    stop();
    return std::nullopt;
  }
  Child child;
  if (tag == 'F') {
    ::close(report[0]);
    child.error = std::atoi(text.c_str());
    return child;
  }
  child.pid = static_cast<pid_t>(std::atol(text.c_str()));
  child.exec_report = report[0];
  return child;
}

bool WarmStart::read_reply(char& tag, std::string& text) {
  unsigned char header[5];
  if (!wait_readable(socket_, kReplyMilliseconds) || !read_exactly(socket_, header, sizeof header))
    return false;
  tag = static_cast<char>(header[0]);
  const std::uint32_t size =
      header[1] | header[2] << 8 | header[3] << 16 | static_cast<std::uint32_t>(header[4]) << 24;
  if (size > kMaxReply) return false;
  text.assign(size, '\0');
  return read_exactly(socket_, text.data(), size);
}

bool WarmStart::ended(pid_t pid, const ExitStatus& status) {
  if (pid <= 0 || pid != pid_) return false;
  say_(
      fmt::format("--preload: the template interpreter {}; the next workers are forked from "
                  "another",
                  describe_exit(status)));
  ++generation_;
  if (socket_watch_) (void)socket_watch_->release();
  socket_watch_.reset();
  ::close(socket_);
  socket_ = -1;
  close_exec_report();
  pid_ = -1;
  ready_ = false;
  watchdog_.remove_group(pid);
  return true;
}

std::optional<ExitStatus> WarmStart::stop() {
  if (pid_ <= 0) return std::nullopt;
  ++generation_;
  // The descriptor is ours, closed below: the watch lets go of it first.
  if (socket_watch_) (void)socket_watch_->release();
  socket_watch_.reset();
  ::close(socket_);
  socket_ = -1;
  close_exec_report();
  // Its session: the template, and a child of its forking a worker at that moment.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  const auto status = wait_for_exit(pid_);
  watchdog_.remove_group(pid_);
  pid_ = -1;
  ready_ = false;
  return status;
}

}  // namespace trainrun::launch
