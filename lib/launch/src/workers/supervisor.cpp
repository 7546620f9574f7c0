#include "trainrun/launch/workers/supervisor.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "cgroup.hpp"
#include "diagnosis_relay.hpp"
#include "early_events.hpp"
#include "exec_reports.hpp"
#include "leftovers.hpp"
#include "python_bootstrap.hpp"
#include "spawn.hpp"
#include "trainrun/base/processes.hpp"
#include "trainrun/base/reaper.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/diagnosis.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"
#include "trainrun/launch/workers/worker_count.hpp"
#include "trainrun/launch/workers/worker_env.hpp"

namespace trainrun::launch {

namespace {

// Our children that are still running (workers' orphans re-parented to us, as a subreaper), but
// `kept` (the --preload template, which outlives the attempts).
std::vector<pid_t> child_processes(pid_t kept) {
  // Scanning /proc costs milliseconds; most jobs end with no child left to find.
  if (!reaper::has_children()) return {};
  std::vector<pid_t> children = live_children(getpid());
  children.erase(std::remove(children.begin(), children.end(), kept), children.end());
  return children;
}

// What a worker's request would be with the environment every worker of the group shares, and
// the job's marker (for the watchdog): how the --preload template is started.
SpawnRequest shared_request(const std::vector<WorkerLaunch>& launches) {
  std::vector<std::vector<std::string>> envps;
  for (const auto& w : launches) envps.push_back(w.envp);
  std::vector<std::string> env = shared_environment(envps);
  for (const std::string& entry : launches.front().envp)
    if (entry.rfind(kJobMarkerEntry, 0) == 0) env.push_back(entry);
  return worker_spawn_request(launches.front().program, launches.front().argv, env, -1, -1, -1);
}

// How long what the workers left may take to end after SIGTERM before it is named.
constexpr auto kNameAfter = std::chrono::seconds(1);

}  // namespace

Supervisor::Supervisor(boost::asio::io_context& io, Watchdog& watchdog, Console& out, Console& err,
                       std::vector<std::string> preload)
    : io_(io),
      watchdog_(watchdog),
      cgroup_(JobCgroup::create()),
      warm_(preload.empty() ? nullptr
                            : std::make_unique<WarmStart>(io, std::move(preload), watchdog,
                                                          [&err](const std::string& line) {
                                                            err.write(launcher_line(line));
                                                          })),
      err_(err),
      output_(io, out, err,
              [this] {
                if (finish_done_) finish_step();
              }),
      finish_timer_(io) {
  exec_reports_ = std::make_unique<ExecReports>(io);
  early_ = std::make_unique<EarlyEvents>();
  if (cgroup_) watchdog_.set_cgroup(cgroup_->path());
  // The orphans that come back to us, a child subreaper: a worker forked by the template's child
  // whose end comes before it is adopted, and what workers left behind.
  reaper::set_orphans([this](pid_t pid, const WaitEvent& event) { child_event(pid, event); });
}

Supervisor::~Supervisor() {
  reaper::set_orphans(nullptr);
  close_channels();
}

void Supervisor::prepare(const std::vector<WorkerLaunch>& launches, std::function<void()> then) {
  if (!warm_ || launches.empty()) return then();
  // The template (started again where it died) is ours to reap, as the workers are.
  warm_->prepare(shared_request(launches), bootstrap_dir(), [this, then = std::move(then)] {
    if (warm_->pid() > 0) adopt(warm_->pid());
    then();
  });
  if (warm_->pid() > 0) adopt(warm_->pid());
}

void Supervisor::cancel_prepare() {
  if (warm_) warm_->cancel();
}

const std::string& Supervisor::bootstrap_dir() {
  static const std::string none;
  if (!python_ && !python_failed_) {
    try {
      python_ = std::make_unique<PythonBootstrap>();
    } catch (const SetupError& e) {
      python_failed_ = true;
      err_.write(launcher_line(
          fmt::format("{}; Python workers start without a diagnosis channel, and without --preload",
                      e.what())));
    }
  }
  return python_ ? python_->dir() : none;
}

void Supervisor::start(const std::vector<WorkerLaunch>& launches, ExitHandler on_exit,
                       std::function<void(std::exception_ptr)> started) {
  on_exit_ = std::move(on_exit);
  exec_reports_->cancel();
  started_ = std::move(started);
  start_error_ = nullptr;
  held_events_.clear();
  early_->clear();
  close_channels();
  workers_.clear();
  output_.reset();
  launches_ = launches;
  next_ = 0;
  spawned_.clear();
  late_signals_.clear();
  forking_ = true;
  ++chain_;
  fork_next();
}

// Every worker is forked before we wait for any exec to succeed, so a large group starts in one
// pass. Each child reports a failed exec through its close-on-exec pipe. A worker forked by the
// --preload template is known by the template's reply, an event: the chain goes on from there.
void Supervisor::fork_next() {
  // A failed start tells the agent, which may start the next group from there: this chain is over.
  const unsigned chain = chain_;
  while (chain == chain_ && forking_ && next_ < launches_.size())
    if (!fork_one()) return;
  if (chain != chain_ || !forking_) return;  // abandoned: started_ is told once its workers end
  forking_ = false;
  late_signals_.clear();
  exec_reports_->watch(spawned_, [this](std::optional<ExecReports::Failure> failure) {
    execs_reported(failure);
  });
}

bool Supervisor::fork_one() {
  const WorkerLaunch& w = launches_[next_];
  Forking f;
  try {
    f.streams = output_.open(w.output);
  } catch (const SpawnError&) {
    fail_start(std::current_exception());
    return false;
  }
  f.request = worker_spawn_request(w.program, w.argv, w.envp, f.streams.out.child,
                                   f.streams.err.child, cgroup_ ? cgroup_->fd() : -1, w.cpus);
  if (w.diagnosis && !bootstrap_dir().empty()) f.channel = open_diagnosis_channel();
  if (f.channel) f.request.kept_fd = f.channel->worker;
  std::optional<ForkOutcome> now = ForkOutcome{};
  if (warm_)
    now = warm_->start(f.request, w.local_rank, [this, chain = chain_](ForkOutcome reply) {
      if (chain != chain_ || !forking_) return;
      forked(std::move(reply));
      if (chain == chain_) fork_next();
    });
  forking_now_ = std::move(f);
  if (!now) {
    // Until the reply: a worker that ends before it is told is held (early_events.hpp).
    early_->expect();
    return false;
  }
  forked(std::move(*now));
  return forking_;
}

void Supervisor::forked(ForkOutcome outcome) {
  Forking f = std::move(*std::exchange(forking_now_, std::nullopt));
  const WorkerLaunch& w = launches_[next_];
  Child s;
  if (outcome.child) {
    s = *outcome.child;
  } else if (!outcome.error) {
    if (f.channel)
      f.request =
          with_diagnosis_bootstrap(std::move(f.request), f.channel->worker, bootstrap_dir());
    s = spawn(f.request);
  }
  if (f.channel) ::close(f.channel->worker);
  const int diagnosis = f.channel ? f.channel->agent : -1;
  const std::vector<WaitEvent> early = early_->replied(s.pid);
  if (s.pid > 0) {
    const bool reaped = std::any_of(early.begin(), early.end(), [](const WaitEvent& e) {
      return e.kind == WaitEvent::Kind::ended;
    });
    // One reaped already is not adopted, nor watched: its pid may be another process' by now.
    if (!reaped) {
      adopt(s.pid);
      watchdog_.add_group(s.pid);
    }
    std::shared_ptr<DiagnosisRelay> relay;
    if (diagnosis >= 0)
      relay = DiagnosisRelay::open(
          io_, diagnosis, [this, local_rank = w.local_rank, pid = s.pid](const std::string& t) {
            script_returned(local_rank, pid, t);
          });
    workers_.push_back(
        {w.local_rank, w.rank, s.pid, true, false, relay, std::chrono::steady_clock::now()});
    spawned_.push_back(s);
    // What it did before its pid was known, in order; held with the others until the start is told.
    for (const WaitEvent& event : early) child_event(s.pid, event);
    // A signal sent to the group while it was being forked reaches this worker too.
    for (const auto& [how, sig] : late_signals_) signal_worker(workers_.back(), how, sig);
  } else if (diagnosis >= 0) {
    ::close(diagnosis);
  }
  output_.start(f.streams, w.output, w.local_rank, w.prefix);
  if (outcome.error) return fail_start(outcome.error);
  if (s.pid <= 0)
    return fail_start(std::make_exception_ptr(
        SpawnError(fork_failure(w.local_rank, s.error, read_process_limits()))));
  ++next_;
}

void Supervisor::fail_start(std::exception_ptr error) {
  forking_ = false;
  early_->clear();
  late_signals_.clear();
  for (auto& s : spawned_)
    if (s.exec_report >= 0) ::close(s.exec_report), s.exec_report = -1;
  abandon_start(error);
}

void Supervisor::abandon_start(std::exception_ptr error) {
  start_error_ = error;
  for (const auto& [pid, event] : std::exchange(held_events_, {}))
    for (auto& w : workers_)
      if (w.pid == pid && event.kind == WaitEvent::Kind::ended) w.running = false;
  // Told once they are reaped, by the loop: a child killed before its exec is a copy of trainrun,
  // which the sweep after a failed start would otherwise find still dying and name as a leftover.
  signal_all(SIGKILL);
  abandoned_start_settled();
}

void Supervisor::execs_reported(std::optional<std::pair<pid_t, int>> failure) {
  if (failure) {
    std::string program;
    for (std::size_t i = 0; i < workers_.size() && i < launches_.size(); ++i)
      if (workers_[i].pid == failure->first) program = launches_[i].program;
    return abandon_start(std::make_exception_ptr(exec_error(program, failure->second)));
  }
  if (auto started = std::exchange(started_, nullptr)) started(nullptr);
  // What came before, in order: the agent knows the group has started.
  for (auto& [pid, event] : std::exchange(held_events_, {})) child_event(pid, event);
}

void Supervisor::abandoned_start_settled() {
  if (!start_error_ || running() > 0) return;
  auto started = std::exchange(started_, nullptr);
  auto error = std::exchange(start_error_, nullptr);
  if (started) started(error);
}

void Supervisor::close_channels() {
  for (auto& w : workers_)
    if (w.diagnosis) w.diagnosis->close(), w.diagnosis.reset();
}

void Supervisor::script_returned(int local_rank, pid_t pid, const std::string& text) {
  const auto r = parse_script_return(text);
  for (auto& w : workers_) {
    if (w.local_rank != local_rank || w.pid != pid || !w.running || w.returned) continue;
    // A notice that is not one is the worker's bootstrap out of step: nothing is timed by it.
    if (!r) return;
    w.returned = true;
    if (returned_) returned_(local_rank, pid, *r);
  }
}

void Supervisor::reap() { reaper::collect(); }

void Supervisor::child_event(pid_t pid, const WaitEvent& event) {
  // The template is our child too; the worker it forks is known by its pid before the loop
  // can reap it (start() is one pass on this thread), so no worker's status comes unknown.
  if (warm_ && event.kind == WaitEvent::Kind::ended && warm_->ended(pid, event.end)) return;
  const auto worker = std::find_if(workers_.begin(), workers_.end(),
                                   [pid](const Worker& w) { return w.pid == pid && w.running; });
  // A worker forked by the template's child whose pid its reply has not told yet.
  if (worker == workers_.end() && early_->hold(pid, event)) return;
  if (worker != workers_.end() && (forking_ || exec_reports_->pending())) {
    // Its report is whole once it ended; the group's start is told before any of its exits.
    if (event.kind == WaitEvent::Kind::ended && !forking_) exec_reports_->settle(pid);
    if (forking_ || exec_reports_->pending()) {
      held_events_.emplace_back(pid, event);
      return;
    }
  }
  if (worker != workers_.end() && start_error_) {
    if (event.kind == WaitEvent::Kind::ended) worker->running = false;
    return abandoned_start_settled();
  }
  for (auto& w : workers_) {
    if (w.pid != pid || !w.running) continue;
    if (event.kind == WaitEvent::Kind::stopped) {
      worker_stopped(w, event.stop_signal);
      continue;
    }
    if (event.kind == WaitEvent::Kind::continued) {
      w.stop_named = false;
      continue;
    }
    // What it told before it ended is taken first: that its script was over.
    if (w.diagnosis) w.diagnosis->drain();
    w.running = false;
    if (on_exit_) on_exit_(w.local_rank, pid, event.end);
  }
}

void Supervisor::adopt(pid_t pid) {
  reaper::adopt(pid, [this](pid_t child, const WaitEvent& event) { child_event(child, event); });
}

void Supervisor::worker_stopped(Worker& w, int sig) {
  // In a session of its own, a worker's group is orphaned: the kernel discards SIGTSTP, SIGTTIN
  // and SIGTTOU for it, so a stop here is SIGSTOP (kill -STOP, a tracer that went away) or a
  // terminal the worker made its own. Either way nothing else would say why the job waits.
  if (w.stop_named) return;
  w.stop_named = true;
  err_.write(launcher_line(
      fmt::format("worker {} (local rank {}, pid {}) is stopped by {}; the job waits for it: "
                  "`kill -CONT {}` resumes it",
                  w.rank, w.local_rank, w.pid, signal_name(sig), w.pid)));
}

void Supervisor::signal_worker(const Worker& w, Signalled how, int sig) {
  if (!w.running) return;
  if (how == Signalled::abort) {
    // The hard limit stays: the worker may raise its own again. A limit that cannot be set (the
    // worker changed its user) leaves the core to the system's settings.
    struct rlimit limit {};
    if (::prlimit(w.pid, RLIMIT_CORE, nullptr, &limit) == 0) {
      limit.rlim_cur = 0;
      ::prlimit(w.pid, RLIMIT_CORE, &limit, nullptr);
    }
    ::kill(w.pid, SIGABRT);
    return;
  }
  if (how == Signalled::process) {
    ::kill(w.pid, sig);
    return;
  }
  ::kill(-w.pid, sig);
  // A worker that moved to another process group (setsid, setpgid) is still our child, not
  // yet reaped: its pid is its own.
  if (::getpgid(w.pid) != w.pid) ::kill(w.pid, sig);
}

void Supervisor::signal_group(Signalled how, int sig) {
  if (forking_) late_signals_.emplace_back(how, sig);
  for (const auto& w : workers_) signal_worker(w, how, sig);
}

void Supervisor::signal_all(int sig) {
  signal_group(Signalled::group, sig);
  if (sig == SIGKILL && cgroup_) cgroup_->signal(SIGKILL);
}

bool Supervisor::signal_one(int local_rank, pid_t pid, int sig) {
  for (const auto& w : workers_) {
    if (w.local_rank != local_rank || w.pid != pid || !w.running) continue;
    signal_worker(w, Signalled::group, sig);
    return true;
  }
  return false;
}

void Supervisor::signal_workers(int sig) { signal_group(Signalled::process, sig); }

void Supervisor::abort_workers() { signal_group(Signalled::abort, SIGABRT); }

std::string Supervisor::stderr_tail(int local_rank) const {
  return output_.stderr_tail(local_rank);
}

std::vector<RunningWorker> Supervisor::running_workers() const {
  std::vector<RunningWorker> out;
  for (const auto& w : workers_)
    if (w.running) out.push_back({w.local_rank, w.pid, w.diagnosis ? w.diagnosis->asker() : -1});
  return out;
}

std::map<int, std::chrono::steady_clock::time_point> Supervisor::started() const {
  std::map<int, std::chrono::steady_clock::time_point> out;
  for (const auto& w : workers_) out.emplace(w.local_rank, w.started);
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
  for (pid_t pid : child_processes(warm_ ? warm_->pid() : -1)) {
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
  std::vector<pid_t> pids = child_processes(warm_ ? warm_->pid() : -1);
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
    output_.drain();
  }
  if (!alive && output_.open_readers() == 0) {
    finish_timer_.cancel();
    for (const auto& w : workers_) watchdog_.remove_group(w.pid);
    auto done = std::move(finish_done_);
    finish_done_ = nullptr;
    close_channels();
    workers_.clear();
    output_.release();
    done();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  // Nothing of ours is alive, yet a pipe is still held open by a process outside our tree: do
  // not wait for it forever.
  if (!alive && now >= finish_deadline_ + std::chrono::seconds(1)) {
    output_.give_up();
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
