#include "agent.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "console.hpp"
#include "entrypoint.hpp"
#include "failure.hpp"
#include "log.hpp"
#include "log_dir.hpp"
#include "output_plan.hpp"
#include "port.hpp"
#include "rendezvous/handler.hpp"
#include "supervisor.hpp"
#include "trainrun/base/system.hpp"
#include "watchdog.hpp"
#include "worker_count.hpp"
#include "worker_env.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

double unix_now() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}

// One node's life: get a topology (locally, or from the rendezvous), start the workers, watch
// them, and decide on their end: finish, restart, or fail. Everything happens on one io_context.
class Agent {
 public:
  Agent(const LaunchConfig& config, std::string program, Watchdog& watchdog)
      : config_(config),
        program_(std::move(program)),
        watchdog_(watchdog),
        console_out_(io_, 1),
        separate_err_(Console::same_file(1, 2) ? nullptr : std::make_unique<Console>(io_, 2)),
        console_err_(separate_err_ ? *separate_err_ : console_out_),
        supervisor_(io_, watchdog_, console_out_, console_err_),
        signals_(io_),
        grace_timer_(io_),
        host_(host_name()),
        inherited_(current_environment()) {}

  int run() {
    const int code = run_job();
    flush_consoles();
    return code;
  }

 private:
  // idle: waiting for the rendezvous (no workers); running; stopping: stop signal sent;
  // finishing: all workers ended, sweeping what they left; done.
  enum class State { idle, running, stopping, finishing, done };

  int run_job() {
    job_.role = config_.role;
    job_.max_restarts = config_.max_restarts;
    job_.use_agent_store = false;
    job_.run_id = config_.standalone ? random_run_id() : config_.rdzv_id;
    job_.signals_to_handle = config_.signals_to_handle;
    job_.virtual_local_rank = config_.virtual_local_rank;
    prefix_template_ = config_.log_line_prefix_template;
    // One node with the static backend needs nobody's agreement: no rendezvous at all.
    const bool use_rendezvous =
        !config_.standalone && (config_.max_nodes > 1 || config_.rdzv_backend != "static");

    std::optional<rdzv::RendezvousOptions> rdzv_options;
    if (use_rendezvous) {
      try {
        rdzv_options = rdzv::rendezvous_options(config_, inherited_);
      } catch (const std::invalid_argument& e) {
        say(e.what());
        return 2;
      }
    }
    try {
      const bool log_files = config_.redirects.is_map || config_.redirects.all_ranks != Std::none ||
                             config_.tee.is_map || config_.tee.all_ranks != Std::none ||
                             config_.local_ranks_filter.has_value();
      logs_ = LogDir::create(config_.log_dir, job_.run_id, !log_files);
      // If trainrun itself is killed, the watchdog finds this job's escaped descendants by it.
      watchdog_.mark_job_directory(logs_.run_dir());
      if (!use_rendezvous) {
        // A single-node job needs no fixed port: unless one was asked for, take a free one.
        port_.emplace(config_.master_port_given ? config_.master_port : 0);
      } else if (rdzv_options->static_backend) {
        // Static: MASTER_PORT is given; the node that will run RANK 0 holds it.
        if (config_.node_rank == 0) port_.emplace(config_.master_port);
      } else {
        // Dynamic: any node may become group rank 0, so each holds a free port to offer.
        port_.emplace(0);
      }
    } catch (const std::exception& e) {
      say(e.what());
      return 1;
    }

    signals_.add(SIGCHLD);
    for (int sig : config_.stop_signals) signals_.add(sig);
    for (int sig : config_.forward_signals) signals_.add(sig);
    wait_for_signal();

    if (use_rendezvous) {
      rdzv_ = rdzv::make_rendezvous_handler(io_, *rdzv_options,
                                            [this](const std::string& line) { say(line); });
      rdzv::ClientEvents events;
      events.on_assignment = [this](const rdzv::Assignment& a) { on_assignment(a); };
      events.on_restart = [this](const rdzv::Restart& r) { on_restart(r); };
      events.on_stop = [this](const rdzv::Stop& s) { on_stop(s); };
      try {
        rdzv_->start(std::move(events));
      } catch (const std::exception& e) {
        say(e.what());
        logs_.remove_if_empty();
        return 1;
      }
      state_ = State::idle;
      join();
    } else {
      topology_.group_rank = 0;
      topology_.group_world_size = 1;
      topology_.base_rank = 0;
      topology_.local_world_size = config_.nproc_per_node.number;
      topology_.world_size = config_.nproc_per_node.number;
      topology_.master_addr = config_.standalone ? "127.0.0.1" : config_.master_addr;
      topology_.master_port = port_->port();
      topology_.restart_count = 0;
      asio::post(io_, [this] { start_attempt(); });
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

  // trainrun's own lines go through the console as well: they keep their place among the
  // workers' lines, and a paused reader cannot block the event loop on them.
  void say(const std::string& line) { console_err_.write("trainrun: " + line + "\n"); }

  // The job is over: write what the console has not taken yet. A reader that takes nothing for
  // Console::kFlushSeconds, or a stop signal meanwhile, ends the wait, so that a paused console
  // never keeps trainrun from exiting; the workers' log files have all of their output.
  void flush_consoles() {
    std::vector<Console*> consoles = {&console_out_};
    if (&console_err_ != &console_out_) consoles.push_back(&console_err_);
    auto queued = [&] {
      size_t total = 0;
      for (Console* c : consoles) total += c->queued();
      return total;
    };
    if (queued() == 0) return;
    io_.restart();
    auto flushed = [&] {
      if (queued() == 0) io_.stop();
    };
    for (Console* c : consoles) c->when_flushed(flushed);

    asio::steady_timer stall(io_);
    // Counted from the end of the job: the rendezvous' last messages take from the same time.
    const auto start = ended_.value_or(std::chrono::steady_clock::now());
    std::function<void()> watch_stall = [&] {
      auto last = start;
      for (Console* c : consoles) last = std::max(last, c->last_progress());
      const auto deadline = last + std::chrono::seconds(Console::kFlushSeconds);
      if (std::chrono::steady_clock::now() >= deadline) {
        io_.stop();
        return;
      }
      stall.expires_at(deadline);
      stall.async_wait([&](boost::system::error_code ec) {
        if (!ec) watch_stall();
      });
    };
    watch_stall();

    int stopped_by = 0;
    std::function<void()> watch_signals = [&] {
      signals_.async_wait([&](boost::system::error_code ec, int sig) {
        if (ec) return;
        if (std::find(config_.stop_signals.begin(), config_.stop_signals.end(), sig) !=
            config_.stop_signals.end()) {
          stopped_by = sig;
          io_.stop();
          return;
        }
        watch_signals();
      });
    };
    watch_signals();

    io_.run();
    stall.cancel();
    signals_.cancel();
    size_t lost = 0;
    for (Console* c : consoles) lost += c->abandon();
    if (lost == 0) return;
    const std::string why =
        stopped_by != 0
            ? fmt::format("received {} while the console was not taking output",
                          signal_name(stopped_by))
            : fmt::format("the console has taken no output for {} s", Console::kFlushSeconds);
    console_err_.write_now(
        fmt::format("trainrun: {}; {} bytes of console output were not written (log files keep the "
                    "workers' output)\n",
                    why, lost));
  }

  void join() {
    rdzv::RendezvousHandler::JoinRequest request;
    request.nproc = config_.nproc_per_node.number;
    request.master_port = port_ ? port_->port() : 0;
    rdzv_->join(request);
  }

  void on_assignment(const rdzv::Assignment& a) {
    if (state_ != State::idle) return;
    topology_.group_rank = a.group_rank;
    topology_.group_world_size = a.group_world_size;
    topology_.base_rank = a.base_rank;
    topology_.local_world_size = a.local_world_size;
    topology_.world_size = a.world_size;
    topology_.master_addr = a.master_addr;
    topology_.master_port = a.master_port;
    topology_.restart_count = a.restart_count;
    job_.max_restarts = a.max_restarts;
    start_attempt();
  }

  void on_restart(const rdzv::Restart& r) {
    if (state_ == State::done) return;
    if (r.failure && r.failure->host != host_)
      say(fmt::format("worker {} on {} failed with exit code {}; restarting ({} of {} restarts)",
                      r.failure->rank, r.failure->host, r.failure->exit_code, r.restart_count,
                      job_.max_restarts));
    else if (!r.failure)
      say(fmt::format("{}; restarting the workers in a new round", r.reason));
    pending_restart_ = true;
    if (state_ == State::running) begin_stop(SIGTERM);
    if (state_ == State::idle) after_attempt();
  }

  void on_stop(const rdzv::Stop& s) {
    if (state_ == State::done) return;
    pending_stop_ = s;
    if (state_ == State::running) begin_stop(SIGTERM);
    if (state_ == State::idle) after_attempt();
  }

  void start_attempt() {
    state_ = State::running;
    failures_.clear();
    stop_signal_ = 0;
    pending_restart_ = false;
    reported_ = false;
    std::vector<WorkerLaunch> launches;
    const std::vector<std::string> argv = config_.worker_argv();
    try {
      for (int lr = 0; lr < config_.nproc_per_node.number; ++lr) {
        const std::string rank_dir = logs_.make_rank_dir(topology_.restart_count, lr);
        WorkerLaunch w;
        w.local_rank = lr;
        w.program = program_;
        for (const auto& arg : argv) w.argv.push_back(expand_local_rank(arg, lr));
        w.argv[0] = argv[0];
        const std::string error_file = rank_dir + "/error.json";
        ::unlink(error_file.c_str());
        w.envp = merge_environment(inherited_, worker_variables(topology_, job_, lr, error_file, inherited_));
        w.output = plan_output(config_, lr, rank_dir);
        w.prefix = line_prefix(prefix_template_, config_.role, topology_.base_rank + lr, lr, host_);
        launches.push_back(std::move(w));
      }
      supervisor_.start(launches, [this](int lr, pid_t pid, ExitStatus st) { on_worker_exit(lr, pid, st); });
    } catch (const std::exception& e) {
      say(e.what());
      exit_code_ = 1;
      state_ = State::finishing;
      if (rdzv_) rdzv_->shutdown(e.what());
      supervisor_.finish(0, [this] { finish(); });
    }
  }

  void wait_for_signal() {
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      on_signal(sig);
      if (state_ != State::done) wait_for_signal();
    });
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) {
      supervisor_.reap();
      return;
    }
    if (std::find(config_.forward_signals.begin(), config_.forward_signals.end(), sig) !=
        config_.forward_signals.end()) {
      supervisor_.signal_all(sig);
      return;
    }
    if (state_ == State::stopping && stop_signal_ != 0) {
      // Asked twice: no more grace.
      say(fmt::format("received {} again; killing the workers now", signal_name(sig)));
      supervisor_.signal_all(SIGKILL);
      return;
    }
    if (state_ == State::finishing || state_ == State::done) return;
    say(fmt::format("received {}; stopping {} worker(s) ({} s grace before SIGKILL)", signal_name(sig),
                    supervisor_.running(), config_.shutdown_timeout));
    stop_signal_ = sig;
    if (rdzv_) rdzv_->shutdown(fmt::format("{} stopped by {}", host_, signal_name(sig)));
    if (state_ == State::idle) {
      exit_code_ = 128 + sig;
      finish();
      return;
    }
    begin_stop(sig);
  }

  void on_worker_exit(int local_rank, pid_t pid, ExitStatus status) {
    if (status.failed() && (state_ == State::running || stop_signal_ == 0))
      record_failure(local_rank, pid, status, state_ == State::running && !pending_restart_ && !pending_stop_);
    if (state_ == State::running && status.failed()) {
      report_failure();
      begin_stop(SIGTERM);
    }
    // Decided after the supervisor's reaping loop has returned, never from inside it.
    if (supervisor_.running() == 0 && (state_ == State::running || state_ == State::stopping)) {
      state_ = State::finishing;
      asio::post(io_, [this] { end_attempt(); });
    }
  }

  void record_failure(int local_rank, pid_t pid, ExitStatus status, bool first_wave) {
    ProcessFailure f;
    f.local_rank = local_rank;
    f.rank = topology_.base_rank + local_rank;
    f.pid = pid;
    f.status = status;
    f.host = host_;
    f.timestamp = unix_now();
    f.error_file = logs_.rank_dir(topology_.restart_count, local_rank) + "/error.json";
    std::string problem;
    if (auto contents = read_error_file(f.error_file, &problem)) {
      f.has_error_file = true;
      f.message = contents->message;
      f.traceback = contents->traceback;
      if (contents->timestamp) f.timestamp = *contents->timestamp;
    } else if (!problem.empty()) {
      say(fmt::format("worker {} (local rank {}): {}", f.rank, local_rank, problem));
    }
    // Once the group is being stopped, only workers that left their own error report count as
    // failures: the rest are ending because we asked them to.
    if (first_wave || f.has_error_file) failures_.push_back(std::move(f));
  }

  // Tells the other nodes about this node's first failure of the attempt.
  void report_failure() {
    if (!rdzv_ || reported_ || failures_.empty()) return;
    reported_ = true;
    const auto& root = failures_[root_cause_index(failures_)];
    rdzv::WorkerFailure f;
    f.host = root.host;
    f.rank = root.rank;
    f.local_rank = root.local_rank;
    f.exit_code = root.status.shell_code();
    f.summary = format_failure_summary(config_.entrypoint, failures_);
    rdzv_->report_failure(f);
  }

  void begin_stop(int sig) {
    state_ = State::stopping;
    supervisor_.signal_all(sig);
    grace_timer_.expires_after(std::chrono::milliseconds(static_cast<long long>(config_.shutdown_timeout * 1000)));
    grace_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || state_ != State::stopping) return;
      if (supervisor_.running() > 0) {
        say(fmt::format("{} worker(s) still running {} s after the stop signal; sending SIGKILL",
                        supervisor_.running(), config_.shutdown_timeout));
        supervisor_.signal_all(SIGKILL);
      }
    });
  }

  void end_attempt() {
    grace_timer_.cancel();
    supervisor_.finish(config_.shutdown_timeout, [this] { after_attempt(); });
  }

  // Every worker of this attempt has ended and nothing they started is left.
  void after_attempt() {
    state_ = State::idle;
    if (stop_signal_ != 0) {
      exit_code_ = 128 + stop_signal_;
      finish();
      return;
    }
    if (rdzv_) {
      after_attempt_in_job();
      return;
    }
    if (failures_.empty()) {
      exit_code_ = 0;
      finish();
      return;
    }
    if (topology_.restart_count < config_.max_restarts) {
      const auto& root = failures_[root_cause_index(failures_)];
      ++topology_.restart_count;
      say(fmt::format("worker {} (local rank {}) failed with exit code {}; restarting the worker "
                      "group ({} of {} restarts)",
                      root.rank, root.local_rank, root.status.shell_code(), topology_.restart_count,
                      config_.max_restarts));
      start_attempt();
      return;
    }
    fail_with_summary();
  }

  // The same decision when the rendezvous decides for the whole job.
  void after_attempt_in_job() {
    if (pending_stop_) {
      const rdzv::Stop s = *pending_stop_;
      if (s.cause == rdzv::StopCause::finished) {
        exit_code_ = 0;
      } else if (s.failure && s.failure->host == host_ && !failures_.empty()) {
        fail_with_summary();
        return;
      } else {
        std::string text = s.failure && !s.failure->summary.empty() ? s.failure->summary : "";
        if (!text.empty()) console_err_.write(text);
        say(s.reason.empty() ? "the job stopped" : s.reason);
        exit_code_ = s.exit_code != 0 ? s.exit_code : 1;
      }
      finish();
      return;
    }
    if (pending_restart_) {
      pending_restart_ = false;
      join();
      return;
    }
    // Our own workers all succeeded: wait at the exit barrier; our failures were reported and
    // the decision is on its way.
    if (failures_.empty()) rdzv_->report_done();
  }

  void fail_with_summary() {
    console_err_.write(format_failure_summary(config_.entrypoint, failures_));
    exit_code_ = failures_[root_cause_index(failures_)].status.shell_code();
    if (exit_code_ == 0) exit_code_ = 1;
    finish();
  }

  void finish() {
    state_ = State::done;
    ended_ = std::chrono::steady_clock::now();
    signals_.cancel();
    grace_timer_.cancel();
    io_.stop();
  }

  LaunchConfig config_;
  std::string program_;
  Watchdog& watchdog_;
  asio::io_context io_;
  Console console_out_;
  std::unique_ptr<Console> separate_err_;  // none when stderr is stdout's file (`2>&1`)
  Console& console_err_;
  Supervisor supervisor_;
  asio::signal_set signals_;
  asio::steady_timer grace_timer_;
  std::string host_;
  std::map<std::string, std::string> inherited_;
  std::optional<std::string> prefix_template_;
  JobSettings job_;
  Topology topology_;
  LogDir logs_;
  std::optional<HeldPort> port_;
  std::unique_ptr<rdzv::RendezvousHandler> rdzv_;
  State state_ = State::idle;
  std::vector<ProcessFailure> failures_;
  bool reported_ = false;
  bool pending_restart_ = false;
  std::optional<rdzv::Stop> pending_stop_;
  int stop_signal_ = 0;
  int exit_code_ = 0;
  std::optional<std::chrono::steady_clock::time_point> ended_;
};

}  // namespace

int run_agent(const LaunchConfig& config) {
  const auto env = current_environment();
  // What the command line left to the node: how many workers it has room for, and the program.
  LaunchConfig counted = config;
  counted.nproc_per_node = resolve_worker_count(config.nproc_per_node);
  if (config.virtual_local_rank) check_virtual_local_rank(counted.nproc_per_node.number, env);
  const ResolvedEntry entry = resolve_entrypoint(counted, env);
  // Output to a closed pipe must not kill the launcher: it drops console output instead.
  ::signal(SIGPIPE, SIG_IGN);
  Watchdog watchdog;
  if (!watchdog.start()) say("warning: cannot start the watchdog process; continuing without it");
  // Orphaned descendants of the workers come back to us, to be stopped and reaped. (Set after
  // the watchdog has started, so that it is not one of them.)
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int code;
  {
    Agent agent(entry.config, entry.program, watchdog);
    code = agent.run();
  }
  watchdog.dismiss();
  return code;
}

}  // namespace trainrun::launch
