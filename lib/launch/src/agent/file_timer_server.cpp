#include "file_timer_server.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/stacks/collect.hpp"
#include "trainrun/stacks/groups.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

// Ignored lines are said up to this many times; a worker that floods the FIFO cannot flood the
// terminal.
constexpr int kIgnoredShown = 10;

// Each stack tool gets this long: the worker's signal waits for its stack.
constexpr std::chrono::milliseconds kStackTimeout{3000};

stacks::CollectOptions expired_timer_collect_options() {
  stacks::CollectOptions options;
  options.timeout = kStackTimeout;
  return options;
}

int make_fifo(const std::string& path) {
  // As torchrun: whatever is at the path is replaced.
  ::unlink(path.c_str());
  if (::mkfifo(path.c_str(), 0600) != 0)
    throw SetupError(
        fmt::format("{}={}: cannot make the file timer's FIFO: {}; name a path in a "
                    "writable directory",
                    kTimerFileVariable, path, std::strerror(errno)));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw SetupError(fmt::format("{}={}: cannot open the file timer's FIFO: {}", kTimerFileVariable,
                                 path, std::strerror(err)));
  }
  return fd;
}

std::string scope_list(const std::vector<TimerRequest>& scopes) {
  std::string out;
  for (const auto& s : scopes) out += (out.empty() ? "'" : ", '") + s.scope_id + "'";
  return out;
}

}  // namespace

FileTimerServer::FileTimerServer(asio::io_context& io, std::string path, const JobLogs& logs,
                                 AgentConsoles& consoles, Hooks hooks)
    : path_(std::move(path)),
      logs_(logs),
      consoles_(consoles),
      hooks_(std::move(hooks)),
      fifo_(io, make_fifo(path_)),
      timer_(io),
      collector_(io, expired_timer_collect_options()) {
  keep_open_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  // Without a writer of our own, the FIFO would read as ended, and be ready, for ever.
  if (keep_open_ < 0) {
    const int err = errno;
    ::unlink(path_.c_str());
    throw SetupError(fmt::format("{}={}: cannot open the file timer's FIFO for writing: {}",
                                 kTimerFileVariable, path_, std::strerror(err)));
  }
  wait_for_requests();
}

FileTimerServer::~FileTimerServer() {
  for (const auto& [collection, reaping] : reaping_)
    for (const Reaping& r : reaping)
      consoles_.say(
          fmt::format("file timer: scope {} of rank {} (local rank {}, pid {}) expired at "
                      "{}; the job ended before its stack was taken: no signal was sent",
                      scope_list(r.expired.scopes), r.worker.rank, r.worker.local_rank,
                      r.expired.pid, iso_time(r.expired.reaping->expiration_time)),
          Level::warning);
  if (keep_open_ >= 0) ::close(keep_open_);
  ::unlink(path_.c_str());
}

void FileTimerServer::wait_for_requests() {
  fifo_.async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (ec) return;
    read_requests();
    wait_for_requests();
  });
}

void FileTimerServer::read_requests() {
  char buf[8192];
  while (true) {
    const ssize_t n = ::read(fifo_.native_handle(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (const char* p = buf; p < buf + n;) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', buf + n - p));
      const char* end = nl ? nl : buf + n;
      if (!skipping_) pending_.append(p, end);
      if (!skipping_ && pending_.size() > kMaxTimerRequest) {
        skipping_ = true;
        pending_.clear();
        ignore(fmt::format("a request longer than {} bytes", kMaxTimerRequest));
      }
      if (nl) {
        if (!skipping_) take_line(pending_);
        pending_.clear();
        skipping_ = false;
      }
      p = nl ? nl + 1 : end;
    }
  }
  arm();
}

void FileTimerServer::ignore(const std::string& why) {
  if (++ignored_ > kIgnoredShown) return;
  consoles_.say(
      fmt::format("file timer: ignored {}{}", why,
                  ignored_ == kIgnoredShown ? " (further ignored requests are not shown)" : ""),
      Level::warning);
}

void FileTimerServer::take_line(const std::string& line) {
  if (line.empty()) return;
  std::string problem;
  const auto request = parse_timer_request(line, &problem);
  if (!request) return ignore(fmt::format("a line that is not a timer request ({})", problem));
  if (!hooks_.find_worker(request->pid))
    return ignore(
        fmt::format("a request for pid {} (scope '{}'), which is not a worker of this "
                    "job",
                    request->pid, request->scope_id));
  if (hooks_.request) hooks_.request();
  timers_.apply(*request);
}

void FileTimerServer::arm() {
  const auto next = timers_.next_expiration();
  if (!next) {
    timer_.cancel();
    return;
  }
  // The deadline is wall-clock time (the client's time.time()): looked at again at least once a
  // second, so that a clock set forward is noticed as torchrun would.
  const double wait = std::clamp(*next - unix_time(), 0.0, 1.0);
  timer_.expires_after(std::chrono::microseconds(static_cast<long long>(wait * 1e6)));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) check();
  });
}

void FileTimerServer::check() {
  std::vector<Reaping> reaping;
  for (auto& expired : timers_.expire(unix_time())) {
    const auto worker = hooks_.find_worker(expired.pid);
    if (!worker) continue;  // ended since: its scopes go with it, as torchrun's do
    if (!expired.reaping) {
      consoles_.say(
          fmt::format("file timer: rank {} (pid {}): scope {} expired; no signal was asked "
                      "for, so the worker goes on",
                      worker->rank, expired.pid, scope_list(expired.scopes)),
          Level::warning);
      continue;
    }
    reaping.push_back({std::move(expired), *worker});
  }
  if (!reaping.empty()) {
    std::vector<StackCollector::Target> targets;
    for (const Reaping& r : reaping) targets.push_back({r.expired.pid});
    const int collection = collections_++;
    reaping_[collection] = std::move(reaping);
    // Each tool may take seconds: the loop (a stop of the job among the rest) goes on meanwhile.
    collector_.collect(std::move(targets), [this, collection](StackCollector::Collected c) {
      const std::vector<Reaping> done = std::move(reaping_.at(collection));
      reaping_.erase(collection);
      for (std::size_t i = 0; i < done.size(); ++i) reap(done[i], std::move(c.stacks[i]));
    });
  }
  arm();
}

void FileTimerServer::reap(const Reaping& r, stacks::Stack stack) {
  const FileTimers::Expired& expired = r.expired;
  const TimerRequest& scope = *expired.reaping;
  const Worker& worker = r.worker;
  // The worker may have ended while its stack was taken, its pid gone or another's since.
  const auto now = hooks_.find_worker(expired.pid);
  const bool same = now && now->attempt == worker.attempt && now->local_rank == worker.local_rank;
  stacks::RankStack rs{worker.rank, host_name(), std::move(stack)};
  std::string where;
  try {
    const std::string dir = logs_.attempt_path(worker.attempt, "timer_expired");
    std::filesystem::create_directories(dir);
    where = stacks::write_dumps(dir, {rs}).front();
  } catch (const std::exception& e) {
    where = fmt::format("not written: {}", e.what());
  }
  consoles_.say(
      fmt::format("file timer: scope {} of rank {} (local rank {}, pid {}) expired at {}; "
                  "{}. Its stack follows (every thread: {})",
                  scope_list(expired.scopes), worker.rank, worker.local_rank, expired.pid,
                  iso_time(scope.expiration_time),
                  same ? fmt::format("sending {}, as its request asked", signal_name(scope.signal))
                       : "it ended while its stack was taken: no signal was sent",
                  where),
      Level::error);
  // The main thread on the terminal; every thread is in the file.
  stacks::Stack shown = rs.stack;
  if (const stacks::Thread* main = rs.stack.main_thread()) shown.threads = {*main};
  consoles_.err().write(stacks::format_stack(shown));
  if (same) ::kill(expired.pid, scope.signal);
}

}  // namespace trainrun::launch
