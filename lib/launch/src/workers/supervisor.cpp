#include "trainrun/launch/workers/supervisor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "trainrun/base/numbers.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/descriptors.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"
#include "trainrun/launch/workers/leftovers.hpp"
#include "trainrun/launch/workers/processes.hpp"
#include "trainrun/launch/workers/worker_count.hpp"

namespace trainrun::launch {

namespace {

int open_log(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw SpawnError(fmt::format("cannot open log file {}: {}", path, std::strerror(errno)));
  return fd;
}

// The file descriptors one worker stream needs: what the child gets, and what we keep.
struct StreamFds {
  int child = -1;      // dup2'ed onto 1 or 2 in the child; -1 to inherit
  int keep_file = -1;  // the log file we write
  int keep_pipe = -1;  // the read end we watch
};

// A stream bound for a log file reaches it through us, also without --tee: a worker writing the
// file itself on a full disk loses its output unseen (a C++ program ignores the error), while a
// reader of ours says so and moves the stream to the console.
StreamFds open_stream(const StreamPlan& plan) {
  StreamFds fds;
  if (plan.route == StreamRoute::inherit) return fds;
  int file = plan.route == StreamRoute::console ? -1 : open_log(plan.file);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    if (file >= 0) ::close(file);
    throw SpawnError(fmt::format("cannot create an output pipe: {}", std::strerror(errno)));
  }
  fds.child = p[1];
  fds.keep_pipe = p[0];
  fds.keep_file = file;
  return fds;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(pid_t parent, const char* program, char** argv, char** envp,
                             int out_fd, int err_fd, int report_fd, int cgroup_fd,
                             const cpu_set_t* cpus) {
  setpgid(0, 0);
  // Inherited by the program and every thread it starts, as numactl --physcpubind would set it.
  if (cpus) sched_setaffinity(0, sizeof(cpu_set_t), cpus);
  // Into the job's cgroup before anything of the worker runs; without it, the process group,
  // the subreaper and the job marker still reach what it starts.
  if (cgroup_fd >= 0) {
    ssize_t ignored = write(cgroup_fd, "0", 1);
    (void)ignored;
  }
  restore_descriptor_limit();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (out_fd >= 0 && dup2(out_fd, 1) < 0) _exit(127);
  if (err_fd >= 0 && dup2(err_fd, 2) < 0) _exit(127);
  execve(program, argv, envp);
  int err = errno;
  ssize_t ignored = write(report_fd, &err, sizeof err);
  (void)ignored;
  _exit(127);
}

// Whether any child of ours is left, ended or not (none is reaped here).
bool has_children() {
  siginfo_t info{};
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WNOTHREAD) == 0;
}

// Our children that are still running (workers' orphans re-parented to us, as a subreaper).
std::vector<pid_t> child_processes() {
  // Scanning /proc costs milliseconds; most jobs end with no child left to find.
  if (!has_children()) return {};
  return live_children(getpid());
}

// How long what the workers left may take to end after SIGTERM before it is named.
constexpr auto kNameAfter = std::chrono::seconds(1);

}  // namespace

Supervisor::Supervisor(boost::asio::io_context& io, Watchdog& watchdog, Console& out, Console& err)
    : io_(io),
      watchdog_(watchdog),
      cgroup_(JobCgroup::create()),
      out_(out),
      err_(err),
      finish_timer_(io) {
  if (cgroup_) watchdog_.set_cgroup(cgroup_->path());
}

void Supervisor::start(const std::vector<WorkerLaunch>& launches, ExitHandler on_exit) {
  on_exit_ = std::move(on_exit);
  workers_.clear();
  open_readers_ = 0;
  ++generation_;  // readers of an earlier group, given up on, must not count against this one
  readers_.clear();
  duplicate_files_.clear();
  stderr_tails_.clear();
  const pid_t parent = getpid();
  // Every worker is forked before we wait for any exec to succeed, so a large group starts in
  // one pass. Each child reports a failed exec through its close-on-exec pipe.
  std::vector<int> reports;
  auto fail = [&](const LaunchError& error) {
    for (int& fd : reports) close_fd(fd);
    signal_all(SIGKILL);
    // Reaped before we go on: a child killed before its exec is a copy of trainrun, which the
    // sweep after a failed start would otherwise find still dying and name as a leftover.
    for (auto& w : workers_) {
      while (waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      w.running = false;
    }
    throw error;
  };
  for (const auto& w : launches) {
    StreamFds out, err;
    Duplicate out_duplicate, err_duplicate;
    try {
      out_duplicate = duplicate_for(w.output.out);
      err_duplicate = duplicate_for(w.output.err);
      out = open_stream(w.output.out);
      err = open_stream(w.output.err);
    } catch (const SpawnError& e) {
      close_fd(out.child), close_fd(out.keep_file), close_fd(out.keep_pipe);
      fail(e);
    }
    auto argv = c_strings(w.argv);
    auto envp = c_strings(w.envp);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int cpu : w.cpus)
      if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
    int report[2] = {-1, -1};
    pid_t pid = -1;
    int error = 0;
    if (pipe2(report, O_CLOEXEC) != 0) {
      error = errno;
    } else {
      pid = fork();
      if (pid == 0)
        exec_child(parent, w.program.c_str(), argv.data(), envp.data(), out.child, err.child,
                   report[1], cgroup_ ? cgroup_->procs_fd() : -1, w.cpus.empty() ? nullptr : &cpus);
      error = errno;
    }
    close_fd(report[1]);
    close_fd(out.child);
    close_fd(err.child);
    if (pid > 0) {
      setpgid(pid, pid);  // also here, so the group exists before we ever signal it
      watchdog_.add_group(pid);
      workers_.push_back({w.local_rank, pid, true});
      reports.push_back(report[0]);
    } else {
      close_fd(report[0]);
    }
    if (out.keep_pipe >= 0)
      tee(out.keep_pipe, out.keep_file, out_, w.prefix, std::move(out_duplicate),
          w.output.out.route, nullptr);
    if (err.keep_pipe >= 0) {
      auto& tail = stderr_tails_[w.local_rank];
      tail = std::make_shared<OutputTail>();
      tee(err.keep_pipe, err.keep_file, err_, w.prefix, std::move(err_duplicate),
          w.output.err.route, tail);
    }
    if (pid <= 0) fail(SpawnError(fork_failure(w.local_rank, error, read_process_limits())));
  }
  for (size_t i = 0; i < reports.size(); ++i) {
    int exec_errno = 0;
    const bool exec_failed = read_exactly(reports[i], &exec_errno, sizeof exec_errno);
    close_fd(reports[i]);
    if (exec_failed) fail(exec_error(launches[i].program, exec_errno));
  }
}

Duplicate Supervisor::duplicate_for(const StreamPlan& plan) {
  if (plan.duplicate_file.empty()) return {};
  auto& file = duplicate_files_[plan.duplicate_file];
  if (!file) {
    const int fd = ::open(plan.duplicate_file.c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
      throw SpawnError(
          fmt::format("cannot open log file {}: {}", plan.duplicate_file, std::strerror(errno)));
    file = std::make_shared<SharedLogFile>(fd);
  }
  return {file, plan.filters};
}

void Supervisor::tee(int pipe_fd, int file_fd, Console& console, const std::string& prefix,
                     Duplicate duplicate, StreamRoute route, std::shared_ptr<OutputTail> tail) {
  const bool console_copy = route == StreamRoute::tee || route == StreamRoute::console;
  auto reader = std::make_shared<TeeReader>(io_, pipe_fd, file_fd, &console, prefix,
                                            std::move(duplicate), console_copy);
  if (route == StreamRoute::console) reader->pass_through();
  if (tail) reader->keep_tail(std::move(tail));
  ++open_readers_;
  readers_.push_back(reader);
  reader->start([this, generation = generation_] {
    if (generation != generation_) return;
    --open_readers_;
    if (finish_done_) finish_step();
  });
}

void Supervisor::reap() {
  while (true) {
    int status = 0;
    // Only the children of this thread: the workers and the orphans that come back to us (the
    // kernel hands them to the subreaper's first thread). The stack tools another thread starts
    // are that thread's to reap, with their exit status.
    pid_t pid = waitpid(-1, &status, WNOHANG | __WNOTHREAD);
    if (pid <= 0) break;
    for (auto& w : workers_) {
      if (w.pid != pid || !w.running) continue;
      w.running = false;
      if (on_exit_) on_exit_(w.local_rank, pid, ExitStatus::from_wait_status(status));
    }
  }
}

void Supervisor::signal_all(int sig) {
  for (const auto& w : workers_) {
    if (!w.running) continue;
    ::kill(-w.pid, sig);
    // A worker that moved to another process group (setsid, setpgid) is still our child, not
    // yet reaped: its pid is its own.
    if (::getpgid(w.pid) != w.pid) ::kill(w.pid, sig);
  }
  if (sig == SIGKILL && cgroup_) cgroup_->signal(SIGKILL);
}

void Supervisor::signal_workers(int sig) {
  for (const auto& w : workers_)
    if (w.running) ::kill(w.pid, sig);
}

std::string Supervisor::stderr_tail(int local_rank) const {
  const auto it = stderr_tails_.find(local_rank);
  return it == stderr_tails_.end() ? std::string() : it->second->text();
}

std::vector<std::pair<int, pid_t>> Supervisor::running_workers() const {
  std::vector<std::pair<int, pid_t>> out;
  for (const auto& w : workers_)
    if (w.running) out.emplace_back(w.local_rank, w.pid);
  return out;
}

size_t Supervisor::running() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w.running;
  return n;
}

std::optional<int> Supervisor::local_rank_of(pid_t pid) const {
  const pid_t group = ::getpgid(pid);
  for (const auto& w : workers_)
    if (w.running && (w.pid == pid || w.pid == group)) return w.local_rank;
  return std::nullopt;
}

bool Supervisor::leftovers(bool send, int sig) {
  bool any = false;
  for (const auto& w : workers_) {
    if (::kill(-w.pid, send ? sig : 0) == 0) any = true;
  }
  for (pid_t pid : child_processes()) {
    any = true;
    if (send) ::kill(pid, sig);
  }
  if (cgroup_ && cgroup_->populated()) {
    any = true;
    if (send) cgroup_->signal(sig);
  }
  return any;
}

void Supervisor::name_leftovers() {
  std::vector<pid_t> pids = child_processes();
  for (const auto& w : workers_) {
    const std::vector<pid_t> members = group_members(w.pid);
    pids.insert(pids.end(), members.begin(), members.end());
  }
  const std::chrono::duration<double> left = finish_deadline_ - std::chrono::steady_clock::now();
  if (!pids.empty()) err_.write(launcher_line(leftovers_line(pids, left.count())));
}

void Supervisor::finish(double grace, std::function<void()> done) {
  finish_done_ = std::move(done);
  finish_killed_ = false;
  finish_deadline_ = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<long long>(grace * 1000));
  finish_name_at_ = std::min(finish_deadline_, std::chrono::steady_clock::now() + kNameAfter);
  leftovers(true, SIGTERM);
  finish_step();
}

void Supervisor::finish_step() {
  reap();
  const bool alive = leftovers(false, 0);
  if (!alive) {
    // No writer of ours is left: what the pipes still hold is bounded, so read it all even while
    // the console is paused; the console's queue is flushed (bounded) when the agent finishes.
    for (const auto& r : readers_)
      if (auto reader = r.lock()) reader->drain();
  }
  if (!alive && open_readers_ == 0) {
    finish_timer_.cancel();
    for (const auto& w : workers_) watchdog_.remove_group(w.pid);
    auto done = std::move(finish_done_);
    finish_done_ = nullptr;
    workers_.clear();
    readers_.clear();
    done();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  // Nothing of ours is alive, yet a pipe is still held open by a process outside our tree: do
  // not wait for it forever.
  if (!alive && now >= finish_deadline_ + std::chrono::seconds(1)) {
    open_readers_ = 0;
    ++generation_;
    finish_step();
    return;
  }
  if (alive && finish_name_at_ && now >= *finish_name_at_) {
    finish_name_at_.reset();
    name_leftovers();
  }
  if (alive && !finish_killed_ && now >= finish_deadline_) {
    leftovers(true, SIGKILL);
    finish_killed_ = true;
  }
  // Leftovers have no exit event of their own that we can wait on; look again shortly.
  finish_timer_.expires_after(std::chrono::milliseconds(alive ? 10 : 50));
  finish_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && finish_done_) finish_step();
  });
}

}  // namespace trainrun::launch
