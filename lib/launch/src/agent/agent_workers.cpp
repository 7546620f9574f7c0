#include "agent_workers.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>

#include <boost/asio/post.hpp>
#include <filesystem>

#include "agent_plan.hpp"
#include "file_timer.hpp"
#include "script_end.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/stacks/groups.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

// Each stack tool gets this long: the worker's end waits for its stack.
stacks::CollectOptions worker_end_collect_options() {
  stacks::CollectOptions options;
  options.timeout = std::chrono::seconds(3);
  return options;
}

}  // namespace

AgentWorkers::AgentWorkers(asio::io_context& io, Watchdog& watchdog, AgentConsoles& consoles,
                           const LaunchConfig& config, const std::string& program,
                           const std::string& host, const JobLogs& logs, RaiseEvent raise)
    : io_(io),
      config_(config),
      consoles_(consoles),
      host_(host),
      logs_(logs),
      raise_(std::move(raise)),
      supervisor_(io, watchdog, consoles.out(), consoles.err(), config.preload),
      grace_timer_(io),
      launch_(config, program, host),
      collector_(io, worker_end_collect_options()) {
  supervisor_.set_first_output([this](int local_rank) {
    raise_(event::FirstOutput{local_rank, attempt()});
  });
  supervisor_.set_script_returned([this](int local_rank, pid_t pid, const ScriptReturn& script) {
    script_returned(local_rank, pid, script);
  });
}

void AgentWorkers::start_file_timer(std::map<std::string, std::string>& inherited,
                                    std::function<void()> progress) {
  const auto path = file_timer_path(inherited);
  if (!path) return;
  FileTimerServer::Hooks hooks;
  hooks.find_worker = [this](pid_t pid) { return find(pid); };
  hooks.request = std::move(progress);
  file_timer_ = std::make_unique<FileTimerServer>(io_, *path, logs_, consoles_, std::move(hooks));
  inherited[kTimerFileVariable] = *path;
}

void AgentWorkers::plan_numa(const std::map<std::string, std::string>& inherited) {
  launch_.plan_numa(inherited, consoles_.sayer());
}

void AgentWorkers::start(const Topology& topology, const JobSettings& job,
                         const std::map<std::string, std::string>& inherited, bool watched,
                         const std::function<void()>& prepare, std::function<void()> started) {
  topology_ = topology;
  node_rank_ = topology.group_rank;
  aborted_ = false;
  finished_.clear();
  signalled_ = false;
  consoles_.say(attempt_line(topology, config_.nproc_per_node.number), Level::debug);
  try {
    if (prepare) prepare();
    auto launches = launch_.launches(topology, job, logs_.dir(), inherited, watched);
    starting_ = true;
    supervisor_.prepare(launches, [this, launches, started = std::move(started)] {
      starting_ = false;
      try {
        supervisor_.start(
            launches, [this](int lr, pid_t pid, ExitStatus st) { exited(lr, pid, st); },
            [this, started](std::exception_ptr error) {
              if (error) return start_failed(error);
              started();
            });
      } catch (...) {
        return start_failed(std::current_exception());
      }
    });
  } catch (...) {
    starting_ = false;
    start_failed(std::current_exception());
  }
}

void AgentWorkers::start_failed(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const LaunchError& e) {
    raise_(event::StartFailed{e.what(), e.exit_code()});
  } catch (const std::exception& e) {
    // Anything else that stops a worker from starting (memory, a system call) is a spawn error.
    const SpawnError spawn_error(e.what());
    raise_(event::StartFailed{spawn_error.what(), spawn_error.exit_code()});
  }
}

void AgentWorkers::signal(const action::SignalWorkers& a, bool abort_first) {
  if (starting_ && a.stop) {
    // No worker runs yet: the group is not started at all.
    starting_ = false;
    supervisor_.cancel_prepare();
    raise_(event::StartCancelled{});
    return;
  }
  signalled_ = true;
  if (abort_first) {
    consoles_.say("stopping the Python workers with SIGABRT: their tracebacks follow on stderr",
                  Level::warning);
    supervisor_.abort_workers();
    aborted_ = true;
    return;
  }
  if (a.whole_group)
    supervisor_.signal_all(a.signal);
  else
    supervisor_.signal_workers(a.signal);
}

void AgentWorkers::arm_grace(const action::ArmGraceTimer& a) {
  grace_timer_.expires_at(a.deadline);
  grace_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) raise_(event::GraceExpired{});
  });
}

void AgentWorkers::sweep(const action::Sweep& a) {
  grace_timer_.cancel();
  // A worker's end asks for the sweep from inside reap(), whose loop must not see the group
  // cleared under it: then from the loop, once reap() has returned.
  if (reaping_) {
    asio::post(io_, [this, a] { sweep(a); });
    return;
  }
  supervisor_.finish(a.grace, [this] {
    event::AttemptEnded ended;
    for (int lr = 0; lr < config_.nproc_per_node.number; ++lr)
      ended.stderr_tails.push_back(supervisor_.stderr_tail(lr));
    raise_(std::move(ended));
  });
}

void AgentWorkers::reap() {
  reaping_ = true;
  supervisor_.reap();
  reaping_ = false;
}

void AgentWorkers::exited(int local_rank, pid_t pid, ExitStatus status) {
  const std::string rank_dir = logs_.dir().rank_dir(attempt(), local_rank);
  const std::string error_file = error_file_in(rank_dir);
  const OutputPlan output = plan_output(config_, local_rank, rank_dir);
  WorkerExit exit{local_rank,   pid, status,          unix_time(),     error_file,
                  std::nullopt, "",  output.out.file, output.err.file, ""};
  exit.aborted = aborted_ && status.signal == SIGABRT;
  consoles_.say(
      fmt::format("worker {} (local rank {}, pid {}) {}", topology_.base_rank + local_rank,
                  local_rank, pid, describe_exit(status)),
      Level::debug);
  const auto finished = finished_.find(local_rank);
  if (finished != finished_.end() && finished->second.pid == pid) {
    const Finished& f = finished->second;
    const EndAfterScript end = end_after_script(topology_.base_rank + local_rank, status, f.script,
                                                f.ended, f.where, config_.exit_grace, signalled_);
    exit.status = end.status;
    exit.teardown = end.teardown;
    // Ended after the grace, it was named then.
    if (!f.ended && !end.teardown.empty()) consoles_.say(end.teardown, Level::warning);
    finished_.erase(finished);
  }
  if (exit.status.failed()) exit.contents = read_error_file(exit.error_file, &exit.problem);
  raise_(event::WorkerExited{std::move(exit)});
}

void AgentWorkers::script_returned(int local_rank, pid_t pid, const ScriptReturn& script) {
  Finished& f = finished_[local_rank];
  f = Finished{pid, script, std::chrono::steady_clock::now(), nullptr, false, ""};
  if (config_.exit_grace <= 0) return;
  f.grace = std::make_unique<asio::steady_timer>(io_);
  f.grace->expires_after(
      std::chrono::microseconds(static_cast<long long>(config_.exit_grace * 1e6)));
  f.grace->async_wait([this, local_rank, pid](boost::system::error_code ec) {
    if (!ec) not_exited(local_rank, pid);
  });
}

void AgentWorkers::not_exited(int local_rank, pid_t pid) {
  // Its own Python traceback too where no tool may read its stack.
  int diagnosis = -1;
  for (const auto& w : supervisor_.running_workers())
    if (w.local_rank == local_rank && w.pid == pid && w.diagnosis >= 0)
      diagnosis = ::fcntl(w.diagnosis, F_DUPFD_CLOEXEC, 3);
  collector_.collect({{pid, diagnosis}}, [this, local_rank, pid](StackCollector::Collected c) {
    end_not_exited(local_rank, pid, std::move(c.stacks.front()));
  });
}

void AgentWorkers::end_not_exited(int local_rank, pid_t pid, stacks::Stack stack) {
  const auto finished = finished_.find(local_rank);
  // It exited while its stack was taken, or its attempt is over.
  if (finished == finished_.end() || finished->second.pid != pid) return;
  Finished& f = finished->second;
  const int rank = topology_.base_rank + local_rank;
  f.where = stacks::where_is(stack);
  stacks::RankStack rs{rank, host_, std::move(stack)};
  std::string dump;
  try {
    const std::string dir = logs_.attempt_path(attempt(), "not_exited");
    std::filesystem::create_directories(dir);
    dump = stacks::write_dumps(dir, {rs}).front();
  } catch (const std::exception& e) {
    dump = fmt::format("not written: {}", e.what());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - f.at).count();
  consoles_.say(fmt::format("{}; ending it (every thread: {})",
                            not_exited_line(rank, seconds, f.where), dump),
                Level::warning);
  // The main thread on the terminal; every thread is in the file.
  stacks::Stack shown = rs.stack;
  if (const stacks::Thread* main = rs.stack.main_thread()) shown.threads = {*main};
  consoles_.err().write(stacks::format_stack(shown));
  f.ended = supervisor_.signal_one(local_rank, pid, SIGKILL);
}

NodeWorkers AgentWorkers::node_workers() const {
  NodeWorkers node{node_rank_,  topology_.group_world_size, host_, logs_.dir().run_dir(), {},
                   std::nullopt};
  for (const auto& w : supervisor_.running_workers())
    node.workers.push_back({topology_.base_rank + w.local_rank, w.local_rank, w.pid, w.diagnosis});
  return node;
}

std::optional<FileTimerServer::Worker> AgentWorkers::find(pid_t pid) const {
  const auto local_rank = supervisor_.local_rank_of(pid);
  if (!local_rank) return std::nullopt;
  return FileTimerServer::Worker{topology_.base_rank + *local_rank, *local_rank, attempt()};
}

}  // namespace trainrun::launch
