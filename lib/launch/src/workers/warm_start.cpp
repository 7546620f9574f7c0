#include "trainrun/launch/workers/warm_start.hpp"

#include <fcntl.h>
#include <fmt/format.h>
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
#include "template_socket.hpp"
#include "trainrun/base/reaper.hpp"
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
constexpr std::chrono::milliseconds kReplyLimit{30'000};

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// Local rank 0's command line, the bootstrap in its environment: each worker forked shows it in
// ps (and /proc/PID/cmdline), as it shows its own script. `end`: where its options end; `in`: its
// stdin, the socket to the agent.
SpawnRequest template_request(const SpawnRequest& shared, const std::string& bootstrap_dir,
                              const std::vector<std::string>& modules, std::size_t end, int in) {
  SpawnRequest request = shared;
  const nlohmann::json settings = {
      {"modules", modules},
      {"prefix", end},
      {"marker", std::string(kJobMarkerEntry.substr(0, kJobMarkerEntry.size() - 1))}};
  request.env = bootstrap_environment(*shared.env, bootstrap_dir, {{"template", settings}});
  request.in = Stdio::from_fd(in);
  request.out = request.err = Stdio::inherit();
  // It is no worker: outside the job's cgroup (which the end of each attempt empties) and on
  // every CPU; each worker joins the one and binds itself as its own request says.
  request.cgroup_fd = -1;
  request.cpus.clear();
  return request;
}

// The template ended (or said nothing for 30 s) while it forked `local_rank`: a worker may run.
std::exception_ptr lost_while_starting(int local_rank) {
  return std::make_exception_ptr(SpawnError(fmt::format(
      "--preload: the template interpreter ended while starting local rank {}", local_rank)));
}

std::string ended_importing(const ExitStatus& status) {
  return fmt::format(
      "--preload: the template interpreter {} before its imports were done; workers start the "
      "ordinary way",
      describe_exit(status));
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
  // The loop is over: what was killed is reaped here, each already SIGKILLed.
  for (const auto& [pid, reaped] : std::exchange(dying_, {})) {
    (void)wait_for_exit(pid);
    watchdog_.remove_group(pid);
  }
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
  if (pid_ > 0 && ready_ && socket_->stirred()) {
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
  Child child = spawn(template_request(shared, bootstrap_dir, modules_, end, fds[1]));
  ::close(fds[1]);
  if (child.pid <= 0) {
    ::close(fds[0]);
    say_(cannot_start(program_, child.error));
    return false;
  }
  pid_ = child.pid;
  socket_ = std::make_unique<TemplateSocket>(io_, fds[0]);
  // Not waited for: an exec that fails ends the template, which closes its socket (imported()).
  exec_report_ = child.exec_report;
  ready_ = false;
  // Its own session, which the watchdog kills if trainrun is killed (its death signal too).
  watchdog_.add_group(pid_);
  socket_->next([this](std::optional<TemplateSocket::Message> m) { imported(std::move(m)); });
  return true;
}

void WarmStart::imported(std::optional<std::pair<char, std::string>> message) {
  if (message && message->first == 'R') {
    ready_ = true;
    close_exec_report();  // it runs Python: its exec worked
    if (!message->second.empty()) say_(message->second);
    go_on();
    return;
  }
  // Its socket is closed: the template ended, or its exec failed, in which case the errno is in
  // its exec report already (written before the child that held the socket exited).
  Child ended;
  ended.exec_report = std::exchange(exec_report_, -1);
  const int exec_errno = ended.exec_report >= 0 ? wait_for_exec(ended) : 0;
  if (exec_errno != 0) {
    say_(cannot_start(program_, exec_errno));
    stop();
    return go_on();
  }
  // Said with its status once the loop has reaped it; the wait for the imports goes on until then.
  stop([this](const ExitStatus& status) {
    say_(ended_importing(status));
    go_on();
  });
}

void WarmStart::close_exec_report() {
  if (exec_report_ >= 0) ::close(exec_report_);
  exec_report_ = -1;
}

std::optional<ForkOutcome> WarmStart::start(const SpawnRequest& r, int local_rank,
                                            std::function<void(ForkOutcome)> done) {
  // Only what the template can carry out: a worker's own environment, its interpreter and
  // options, and the template's own command (a script named after its rank is another program).
  if (!ready_ || off_ || pid_ < 0 || asked_ || !r.env || r.program != program_ ||
      r.argv.size() < options_.size() + command_.size() ||
      !std::equal(options_.begin(), options_.end(), r.argv.begin()) ||
      !std::equal(command_.begin(), command_.end(),
                  r.argv.begin() + static_cast<std::ptrdiff_t>(options_.size())))
    return ForkOutcome{};
  std::optional<ForkRequest> request = fork_request(
      r, {::fcntl(0, F_GETFD) >= 0, ::fcntl(1, F_GETFD) >= 0, ::fcntl(2, F_GETFD) >= 0});
  if (!request) return ForkOutcome{};
  int report[2];
  if (!make_pipe(report)) {
    Child failed;
    failed.error = errno;
    failed.pipe_failed = true;
    return ForkOutcome{failed, nullptr};
  }
  std::vector<int> fds = std::move(request->fds);
  fds.push_back(report[1]);
  std::string message;
  put_u32(message, static_cast<std::uint32_t>(request->json.size()));
  message += request->json;
  const bool sent = socket_->send(message, fds);
  ::close(report[1]);
  if (!sent) {
    // Nothing was forked for a request the template did not take whole.
    ::close(report[0]);
    say_("--preload: the template interpreter ended; workers start the ordinary way");
    stop();
    return ForkOutcome{};
  }
  // The reply is an event: the loop serves the job's store meanwhile.
  asked_ = Asked{report[0], local_rank, std::move(done)};
  socket_->next(
      [this](std::optional<TemplateSocket::Message> reply) { answered(std::move(reply)); },
      kReplyLimit);
  return std::nullopt;
}

void WarmStart::answered(std::optional<std::pair<char, std::string>> reply) {
  if (!asked_) return;
  Asked asked = std::move(*std::exchange(asked_, std::nullopt));
  const char tag = reply ? reply->first : 0;
  if (tag != 'P' && tag != 'U' && tag != 'F') {
    ::close(asked.report);
    stop();
    return asked.done({std::nullopt, lost_while_starting(asked.local_rank)});
  }
  if (tag == 'U') {
    ::close(asked.report);
    say_(reply->second);
    off_ = true;
    stop();
    return asked.done({});
  }
  Child child;
  if (tag == 'F') {
    ::close(asked.report);
    child.error = std::atoi(reply->second.c_str());
  } else {
    child.pid = static_cast<pid_t>(std::atol(reply->second.c_str()));
    child.exec_report = asked.report;
  }
  asked.done({child, nullptr});
}

bool WarmStart::ended(pid_t pid, const ExitStatus& status) {
  if (pid <= 0 || pid != pid_) return false;
  const bool imported = ready_;
  say_(imported ? fmt::format("--preload: the template interpreter {}; the next workers are "
                              "forked from another",
                              describe_exit(status))
                : ended_importing(status));
  socket_.reset();
  close_exec_report();
  pid_ = -1;
  ready_ = false;
  watchdog_.remove_group(pid);
  if (auto asked = std::exchange(asked_, std::nullopt)) {
    ::close(asked->report);
    asked->done({std::nullopt, lost_while_starting(asked->local_rank)});
  }
  if (!imported) go_on();
  return true;
}

void WarmStart::stop(std::function<void(const ExitStatus&)> reaped) {
  if (pid_ <= 0) return;
  socket_.reset();
  close_exec_report();
  if (auto asked = std::exchange(asked_, std::nullopt)) ::close(asked->report);
  // Its session: the template, and a child of its forking a worker at that moment.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  // Reaped by the loop (reaper::collect on SIGCHLD), not waited for here; its process group
  // stays reserved, and watched, until then.
  const pid_t pid = std::exchange(pid_, -1);
  ready_ = false;
  dying_[pid] = std::move(reaped);
  reaper::adopt(pid, [this](pid_t child, const WaitEvent& event) {
    if (event.kind != WaitEvent::Kind::ended) return;
    const auto it = dying_.find(child);
    if (it == dying_.end()) return;
    auto then = std::move(it->second);
    dying_.erase(it);
    watchdog_.remove_group(child);
    if (then) then(event.end);
  });
}

}  // namespace trainrun::launch
