#include "agent.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "agent_consoles.hpp"
#include "agent_plan.hpp"
#include "agent_policy.hpp"
#include "console.hpp"
#include "descriptors.hpp"
#include "entrypoint.hpp"
#include "errors.hpp"
#include "failure.hpp"
#include "job_summary.hpp"
#include "log.hpp"
#include "log_dir.hpp"
#include "output_plan.hpp"
#include "port.hpp"
#include "rendezvous_options.hpp"
#include "supervisor.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/rendezvous/etcd.hpp"
#include "trainrun/base/wording.hpp"
#include "watchdog.hpp"
#include "worker_count.hpp"
#include "worker_env.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

using Clock = AgentPolicy::Clock;

std::string describe_exit(const ExitStatus& status) {
  if (status.signal != 0) return "was killed by " + signal_name(status.signal);
  return fmt::format("exited with code {}", status.code);
}

double unix_now() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}

// --summary-file, written whole at the end (a failure to write it is said, not fatal).
void write_job_summary(const std::string& path, JobSummary& summary, int exit_code,
                       const std::string& error) {
  if (path.empty()) return;
  summary.finished(exit_code, unix_now(), error);
  try {
    write_file_atomically(path, summary.to_json());
    say("job summary written to " + path, Level::debug);
  } catch (const LaunchError& e) {
    say(e.what(), Level::error);
  }
}

// One node's life on one io_context. What to do is AgentPolicy's to decide; the agent turns
// worker exits, signals, timers and the rendezvous into its events and carries out its actions.
class Agent {
 public:
  Agent(const LaunchConfig& config, std::string program, Watchdog& watchdog)
      : config_(config),
        program_(std::move(program)),
        watchdog_(watchdog),
        host_(host_name()),
        policy_(config, host_),
        summary_(host_, config.entrypoint, config.entry_args, unix_now()) {}

  int run() {
    int code;
    try {
      code = run_job();
    } catch (const LaunchError& e) {
      write_summary(e.exit_code(), e.what());
      throw;
    }
    // Counted from the end of the job: the rendezvous' last messages take from the same time.
    consoles_.flush(signals_, config_.stop_signals, ended_.value_or(Clock::now()));
    write_summary(code);
    return code;
  }

 private:
  int run_job() {
    job_ = job_settings(config_, config_.standalone ? random_run_id() : config_.rdzv_id);
    std::optional<rendezvous::RendezvousOptions> rdzv_options;
    if (uses_rendezvous(config_)) {
      rdzv_options = rendezvous_options(config_, inherited_);
      rdzv_options->limits = server_limits_for(config_.nproc_per_node.number);
    }
    summary_.set_run_id(job_.run_id);
    logs_ = LogDir::create(config_.log_dir, job_.run_id, !logs_worker_output(config_));
    say_on_console("log directory: " + logs_.run_dir(), Level::debug);
    // If trainrun itself is killed, the watchdog finds this job's escaped descendants by it.
    watchdog_.mark_job_directory(logs_.run_dir());
    try {
      if (auto port = port_to_hold(config_, rdzv_options.has_value())) port_.emplace(*port);
      if (rdzv_options) start_rendezvous(*rdzv_options);
    } catch (const LaunchError&) {
      logs_.remove_if_empty();
      throw;
    }

    signals_.add(SIGCHLD);
    for (int sig : config_.stop_signals) signals_.add(sig);
    for (int sig : config_.forward_signals) signals_.add(sig);
    wait_for_signal();

    if (rdzv_options) {
      apply(policy_.start_in_job(Clock::now()));
    } else {
      asio::post(io_, [this] { apply(policy_.start_single_node(port_->port(), Clock::now())); });
    }
    io_.run();
    if (rdzv_) {
      // Closing our own connection lets a server we host finish at once; then the loop runs
      // until its last messages have reached the other nodes (bounded).
      rdzv_.reset();
      io_.restart();
      io_.run_for(std::chrono::seconds(5));
    }
    logs_.remove_if_empty();
    return exit_code_;
  }

  // Throws SetupError when this node must host the rendezvous and cannot.
  void start_rendezvous(const rendezvous::RendezvousOptions& options) {
    rendezvous::LogFunction log = [this](const std::string& line) { say_on_console(line); };
    if (is_etcd_backend(config_.rdzv_backend)) {
      if (config_.rdzv_backend == "etcd-v2") {
        say_on_console("--rdzv-backend=etcd-v2: trainrun speaks etcd's v3 API for etcd and etcd-v2");
      }
      rdzv_ = rendezvous::make_etcd_rendezvous_handler(io_, options, std::move(log));
    } else {
      rdzv_ = rendezvous::make_rendezvous_handler(io_, options, std::move(log));
    }
    rendezvous::ClientEvents events;
    events.on_assignment = [this](const rendezvous::Assignment& a) {
      announce_node(a);
      apply(policy_.assignment(a, Clock::now()));
    };
    events.on_restart = [this](const rendezvous::Restart& r) {
      apply(policy_.restart(r, Clock::now()));
    };
    events.on_stop = [this](const rendezvous::Stop& s) {
      summary_.stopped(s);
      apply(policy_.stop(s, Clock::now()));
    };
    try {
      rdzv_->start(std::move(events));
    } catch (const std::runtime_error& e) {
      throw SetupError(e.what());
    }
  }

  void wait_for_signal() {
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD)
        supervisor_.reap();
      else
        apply(policy_.signal(sig, Clock::now()));
      if (!policy_.done()) wait_for_signal();
    });
  }

  void on_worker_exit(int local_rank, pid_t pid, ExitStatus status) {
    const std::string error_file = error_file_in(logs_.rank_dir(attempt_, local_rank));
    WorkerExit exit{local_rank, pid, status, unix_now(), error_file, std::nullopt, ""};
    if (status.failed()) exit.contents = read_error_file(exit.error_file, &exit.problem);
    summary_.worker_exited(local_rank, pid, status, exit.seen_at,
                           exit.contents ? error_file : "",
                           exit.contents ? exit.contents->message : "");
    say_on_console(fmt::format("worker {} (local rank {}, pid {}) {}", base_rank_ + local_rank,
                               local_rank, pid, describe_exit(status)),
                   Level::debug);
    for (const AgentAction& a : policy_.worker_exited(exit, Clock::now())) {
      // Carried out after the supervisor's reaping loop has returned, never from inside it.
      if (auto* sweep = std::get_if<action::Sweep>(&a))
        asio::post(io_, [this, s = *sweep] { carry_out(s); });
      else
        std::visit([this](const auto& x) { carry_out(x); }, a);
    }
  }

  void apply(const AgentActions& actions) {
    for (const AgentAction& a : actions) std::visit([this](const auto& x) { carry_out(x); }, a);
  }

  void carry_out(const action::StartWorkers& a) {
    attempt_ = a.topology.restart_count;
    base_rank_ = a.topology.base_rank;
    job_.max_restarts = a.max_restarts;
    summary_.attempt_started(a.topology, unix_now());
    say_on_console(fmt::format("attempt {}: starting {} (ranks {}..{} of {}), MASTER_ADDR={} "
                               "MASTER_PORT={}",
                               a.topology.restart_count,
                               count_of(config_.nproc_per_node.number, "worker"),
                               a.topology.base_rank,
                               a.topology.base_rank + config_.nproc_per_node.number - 1,
                               a.topology.world_size, a.topology.master_addr,
                               a.topology.master_port),
                   Level::debug);
    std::vector<WorkerLaunch> launches;
    try {
      for (int lr = 0; lr < config_.nproc_per_node.number; ++lr) {
        const std::string rank_dir = logs_.make_rank_dir(attempt_, lr);
        ::unlink(error_file_in(rank_dir).c_str());
        launches.push_back(
            worker_launch(config_, program_, a.topology, job_, lr, rank_dir, host_, inherited_));
      }
      supervisor_.start(launches,
                        [this](int lr, pid_t pid, ExitStatus st) { on_worker_exit(lr, pid, st); });
    } catch (const LaunchError& e) {
      apply(policy_.start_failed(e.what(), e.exit_code(), Clock::now()));
    } catch (const std::exception& e) {
      apply(policy_.start_failed(e.what(), 1, Clock::now()));
    }
  }
  void carry_out(const action::SignalWorkers& a) { supervisor_.signal_all(a.signal); }
  void carry_out(const action::ArmGraceTimer& a) {
    grace_timer_.expires_at(a.deadline);
    grace_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) apply(policy_.grace_expired(Clock::now()));
    });
  }
  void carry_out(const action::Sweep& a) {
    grace_timer_.cancel();
    supervisor_.finish(a.grace, [this] {
      summary_.attempt_ended(policy_.failures(), unix_now());
      apply(policy_.attempt_ended(Clock::now()));
    });
  }
  void carry_out(const action::Join&) {
    rendezvous::RendezvousHandler::JoinRequest request;
    request.nproc = config_.nproc_per_node.number;
    request.master_port = port_ ? port_->port() : 0;
    rdzv_->join(request);
  }
  void carry_out(const action::ReportFailure& a) { rdzv_->report_failure(a.failure); }
  void carry_out(const action::ReportDone&) { rdzv_->report_done(); }
  void carry_out(const action::ShutdownRendezvous& a) { rdzv_->shutdown(a.reason); }
  void carry_out(const action::Say& a) { say_on_console(a.line, a.level); }
  void carry_out(const action::WriteSummary& a) { consoles_.err().write(a.text); }
  void carry_out(const action::Finish& a) {
    exit_code_ = a.exit_code;
    ended_ = Clock::now();
    signals_.cancel();
    grace_timer_.cancel();
    io_.stop();
  }

  // trainrun's own lines go through the console while the loop runs: they keep their place among
  // the workers' lines, and a paused reader cannot block the event loop on them.
  void say_on_console(const std::string& line, Level level = Level::info) {
    const std::string text = launcher_line(line, level);
    if (!text.empty()) consoles_.err().write(text);
  }

  // Once per job, on a multi-node job: which node this is and the address the others reach it by.
  void announce_node(const rendezvous::Assignment& a) {
    if (announced_ || (a.group_world_size <= 1 && config_.max_nodes <= 1)) return;
    announced_ = true;
    const std::string addr = rdzv_->advertised_address();
    say_on_console(fmt::format("node rank {} of {} (host {}, advertising {}; ranks {}..{})",
                               a.group_rank, count_of(a.group_world_size, "node"), host_,
                               addr.empty() ? "?" : addr, a.base_rank,
                               a.base_rank + a.local_world_size - 1));
  }

  void write_summary(int exit_code, const std::string& error = {}) {
    write_job_summary(config_.summary_file, summary_, exit_code, error);
  }

  LaunchConfig config_;
  std::string program_;
  Watchdog& watchdog_;
  asio::io_context io_;
  AgentConsoles consoles_{io_};
  Supervisor supervisor_{io_, watchdog_, consoles_.out(), consoles_.err()};
  asio::signal_set signals_{io_};
  asio::steady_timer grace_timer_{io_};
  std::map<std::string, std::string> inherited_ = current_environment();
  std::string host_;
  JobSettings job_;
  LogDir logs_;
  std::optional<HeldPort> port_;
  std::unique_ptr<rendezvous::RendezvousHandler> rdzv_;
  AgentPolicy policy_;
  JobSummary summary_;
  bool announced_ = false;
  int base_rank_ = 0;  // the running attempt's RANK of local rank 0
  int attempt_ = 0;  // the running attempt's restart count: where its rank directories are
  int exit_code_ = 0;
  std::optional<Clock::time_point> ended_;
};

}  // namespace

int run_agent(const LaunchConfig& config) {
  const auto env = current_environment();
  // What the command line left to the node: how many workers it has room for, and the program.
  LaunchConfig counted = config;
  std::optional<ResolvedEntry> resolved;
  try {
    counted.nproc_per_node = resolve_worker_count(config.nproc_per_node);
    if (config.virtual_local_rank) check_virtual_local_rank(counted.nproc_per_node.number, env);
    resolved = resolve_entrypoint(counted, env);
  } catch (const LaunchError& e) {
    JobSummary summary(host_name(), config.entrypoint, config.entry_args, unix_now());
    write_job_summary(config.summary_file, summary, e.exit_code(), e.what());
    throw;
  }
  const ResolvedEntry& entry = *resolved;
  // Output to a closed pipe must not kill the launcher: it drops console output instead.
  ::signal(SIGPIPE, SIG_IGN);
  Watchdog watchdog;
  if (!watchdog.start())
    say("warning: cannot start the watchdog process; continuing without it", Level::warning);
  // Orphaned descendants of the workers come back to us, to be stopped and reaped. (Set after
  // the watchdog has started, so that it is not one of them.)
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int code;
  try {
    Agent agent(entry.config, entry.program, watchdog);
    code = agent.run();
  } catch (const LaunchError&) {
    // Nothing of the job was started: the watchdog has nothing to stop.
    watchdog.dismiss();
    throw;
  }
  watchdog.dismiss();
  return code;
}

}  // namespace trainrun::launch
