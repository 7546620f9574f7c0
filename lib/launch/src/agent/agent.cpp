#include "trainrun/launch/agent/agent.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "trainrun/base/system.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/agent/agent_consoles.hpp"
#include "trainrun/launch/agent/agent_plan.hpp"
#include "trainrun/launch/agent/agent_policy.hpp"
#include "trainrun/launch/agent/agent_store.hpp"
#include "trainrun/launch/agent/file_timer_server.hpp"
#include "trainrun/launch/agent/job_summary.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/output/console.hpp"
#include "trainrun/launch/output/log_dir.hpp"
#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/launch/preflight/local_offer.hpp"
#include "trainrun/launch/preflight/preflight_probe.hpp"
#include "trainrun/launch/preflight/preflight_run.hpp"
#include "trainrun/launch/rendezvous/rendezvous_options.hpp"
#include "trainrun/launch/rollcall/hang_watch.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"
#include "trainrun/launch/workers/descriptors.hpp"
#include "trainrun/launch/workers/failure.hpp"
#include "trainrun/launch/workers/flight_recorder.hpp"
#include "trainrun/launch/workers/numa_binding.hpp"
#include "trainrun/launch/workers/port.hpp"
#include "trainrun/launch/workers/python_exec.hpp"
#include "trainrun/launch/workers/python_torch.hpp"
#include "trainrun/launch/workers/supervisor.hpp"
#include "trainrun/launch/workers/watchdog.hpp"
#include "trainrun/launch/workers/worker_count.hpp"
#include "trainrun/launch/workers/worker_env.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

using Clock = AgentPolicy::Clock;

// One node's life on one io_context. What to do is AgentPolicy's to decide; the agent turns
// worker exits, signals, timers and the rendezvous into its events and carries out its actions.
class Agent {
 public:
  Agent(const LaunchConfig& config, std::string program, Watchdog& watchdog)
      : config_(config),
        program_(std::move(program)),
        watchdog_(watchdog),
        host_(host_name()),
        policy_(config, host_, master_addr_alone(config)),
        summary_(host_, config.entrypoint, config.entry_args, unix_time()) {}

  // Looked up only for a job that only ever has this node (a resolver may be slow).
  static std::string master_addr_alone(const LaunchConfig& config) {
    if (config.max_nodes != 1) return {};
    return one_node_master_addr(config, [] {
      const std::string name = fully_qualified_host_name();
      return names_this_machine(name) ? name : std::string();
    });
  }

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
    if (!kept_logs_.empty()) say(kept_logs_);
    write_summary(code);
    return code;
  }

 private:
  // The workers' interpreter's version, asked once, where something needs it.
  const std::string& workers_python_version() {
    if (python_.version.empty()) python_.version = python_version(program_);
    return python_.version;
  }

  // Which PyTorch the Python workers will import, for the variables only torch 1.x needs.
  std::optional<int> worker_torch_major() {
    torch_version_ = python_torch_version(program_).value_or("");
    const std::optional<int> major = parse_torch_major(torch_version_);
    say_on_console(major
                       ? fmt::format("{}: PyTorch {}.x", program_, *major)
                       : program_ + ": no PyTorch version found; workers get torch 2.x's variables",
                   Level::debug);
    return major;
  }

  int run_job() {
    // As torchrun 2.x, which gives such a job a fresh id; a --rdzv-id given is kept.
    const bool fresh_id =
        config_.standalone || (standalone_in_torchrun(config_) && config_.rdzv_id == "none");
    job_ = job_settings(config_, fresh_id ? random_run_id() : config_.rdzv_id);
    job_.python_workers = runs_python(program_);
    python_ = PythonExec{
        program_, inherited_.count("PYTHON_EXEC") != 0 && !inherited_.at("PYTHON_EXEC").empty(),
        ""};
    if (job_.python_workers && shown(Level::debug)) {
      workers_python_version();
      say_on_console(python_line(python_), Level::debug);
    }
    if (job_.python_workers) job_.torch_major = worker_torch_major();
    job_.use_agent_store = uses_agent_store(config_, job_, inherited_);
    job_.may_use_nccl = count_nvidia_gpus() > 0;
    if (!config_.numa_binding.empty()) {
      numa_ = plan_numa_binding(config_.numa_binding, config_.nproc_per_node.number,
                                sysfs_root(inherited_), inherited_, own_cpu_affinity());
      for (const auto& line : numa_.warnings) say_on_console(line, Level::warning);
      for (const auto& line : numa_.details) say_on_console(line, Level::debug);
    }
    std::optional<rendezvous::TcpRendezvousOptions> rdzv_options;
    if (uses_rendezvous(config_)) {
      rdzv_options = rendezvous_options(config_, inherited_);
      rdzv_options->limits = server_limits_for(config_.nproc_per_node.number);
    }
    summary_.set_run_id(job_.run_id);
    logs_ = LogDir::create(config_.log_dir, job_.run_id, !logs_worker_output(config_));
    say_on_console("log directory: " + logs_.run_dir(), Level::debug);
    // If trainrun itself is killed, the watchdog finds this job's escaped descendants by it.
    watchdog_.mark_job_directory(logs_.run_dir());
    watchdog_.set_log_tree(logs_.own_root());
    start_roll_call();
    start_hang_watch();
    try {
      if (auto port = port_to_hold(config_, rdzv_options.has_value())) port_.emplace(*port);
      if (rdzv_options && config_.preflight != PreflightMode::off && config_.max_nodes > 1)
        open_preflight();
      if (rdzv_options) start_rendezvous(*rdzv_options);
      start_file_timer();
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
    if (exit_code_ == 0) drop_console_copies();
    if (!job_.heartbeat_file.empty()) ::unlink(job_.heartbeat_file.c_str());
    logs_.remove_if_empty();
    const bool kept = directory_exists(logs_.run_dir());
    summary_.set_log_dir(kept ? logs_.run_dir() : "");
    if (kept && exit_code_ == 0 && logs_.temporary())
      kept_logs_ = fmt::format(
          "log directory kept: {} (it holds what the console did not show; --log-dir chooses "
          "where)",
          logs_.run_dir());
    return exit_code_;
  }

  static bool directory_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  // A job that succeeded without --log-dir keeps no copy of what the console showed (--tee), so
  // that each run does not leave a directory behind; what only the files hold stays. When the
  // console went away, the files hold what it did not show.
  void drop_console_copies() {
    if (!logs_.temporary() || consoles_.out().closed() || consoles_.err().closed()) return;
    for (int attempt = 0; attempt <= attempt_; ++attempt) {
      for (int lr = 0; lr < config_.nproc_per_node.number; ++lr) {
        const OutputPlan plan = plan_output(config_, lr, logs_.rank_dir(attempt, lr));
        for (const StreamPlan* stream : {&plan.out, &plan.err}) {
          if (stream->route != StreamRoute::tee) continue;
          ::unlink(stream->file.c_str());
          if (!stream->duplicate_file.empty()) ::unlink(stream->duplicate_file.c_str());
        }
      }
    }
  }

  // Throws SetupError when this node must host the rendezvous and cannot.
  void start_rendezvous(const rendezvous::TcpRendezvousOptions& options) {
    rdzv_ = make_rendezvous(io_, config_, options,
                            [this](const std::string& line) { say_on_console(line); });
    rendezvous::ClientEvents events;
    events.on_assignment = [this](const rendezvous::Assignment& a) {
      announce_node(a);
      const std::string not_free = preference_line(a, preferred_rank());
      if (!not_free.empty()) say_on_console(not_free);
      if (offer_ && !a.preflight.empty()) return run_preflight(a);
      apply(policy_.assignment(a, Clock::now()));
    };
    events.on_restart = [this](const rendezvous::Restart& r) {
      drop_preflight();
      apply(policy_.restart(r, Clock::now()));
    };
    events.on_halt = [this](const rendezvous::Halt& h) {
      drop_preflight();
      apply(policy_.halt(h, Clock::now()));
    };
    events.on_stop = [this](const rendezvous::Stop& stop) {
      drop_preflight();
      const rendezvous::Stop s = with_hint(stop);
      summary_.stopped(s);
      apply(policy_.stop(s, Clock::now()));
    };
    events.on_stacks_ask = [this](std::function<void(std::string)> reply) {
      if (!roll_call_)
        return reply(R"({"error": "this node's agent could not start its roll call"})");
      roll_call_->answer([reply](nlohmann::json mine) {
        reply(fit_node_answer(std::move(mine), rendezvous::kMaxStacksAnswerBytes));
      });
    };
    if (roll_call_) roll_call_->set_ask_others([this](auto done) { ask_other_nodes(done); });
    try {
      rdzv_->start(std::move(events));
    } catch (const rendezvous::HostingError& e) {
      throw SetupError(fmt::format("{}; {}", e.what(), hosting_hint(config_)));
    } catch (const std::runtime_error& e) {
      throw SetupError(e.what());
    }
  }

  // The preflight's port, open for the job's life, and this node's offer, sent with each join. A
  // node that cannot open one runs without it (the others do not check it), and says so.
  void open_preflight() {
    try {
      LocalRun run;
      run.entrypoint = config_.entrypoint;
      if (config_.entry_mode == EntryMode::python_script)
        run.entrypoint_file = config_.entrypoint;
      else if (config_.entry_mode == EntryMode::executable)
        run.entrypoint_file = program_;
      if (job_.python_workers) {
        run.python = workers_python_version();
        run.torch = torch_version_;
      }
      offer_ = local_offer(0, run);
      preflight_listener_ = std::make_unique<PreflightListener>(io_, offer_->id);
      offer_->port = preflight_listener_->port();
    } catch (const std::exception& e) {
      offer_.reset();
      say_on_console(fmt::format("the preflight cannot open its port ({}); the other nodes will "
                                 "not check this one",
                                 e.what()),
                     Level::warning);
    }
  }

  // The round has formed: check the links, MASTER_ADDR and what every node runs before any
  // worker starts; a node that fails ends the job on every node (not a leave: a lost node would
  // be replaced by a restart, which would meet the same misconfiguration).
  void run_preflight(const rendezvous::Assignment& a) {
    drop_preflight();
    PreflightJob job;
    job.me = PreflightNode{host_, a.group_rank, rdzv_->advertised_address()};
    job.assignment = a;
    job.mine = *offer_;
    job.mode = config_.preflight;
    job.log_dir = logs_.run_dir();
    const auto started = Clock::now();
    const std::uint64_t run = ++preflight_runs_;
    preflight_ = PreflightRun::start(io_, std::move(job), [this, a, started, run](auto findings) {
      // Not from inside the run's own callback: it is dropped here. A stop, restart or halt that
      // came meanwhile dropped it already (the loop may be past the job's end).
      asio::post(io_, [this, a, started, run, findings = std::move(findings)] {
        if (run != preflight_runs_ || !preflight_ || policy_.done()) return;
        preflight_.reset();
        finish_preflight(a, findings, Clock::now() - started);
      });
    });
  }

  void finish_preflight(const rendezvous::Assignment& a,
                        const std::vector<PreflightFinding>& findings, Clock::duration took) {
    bool failed = false;
    for (const auto& f : findings) {
      if (f.error)
        failed = true;
      else
        say_on_console("preflight: " + f.line, Level::warning);
    }
    const PreflightNode me{host_, a.group_rank, rdzv_->advertised_address()};
    // The stop that follows says the line on every node, this one included.
    if (failed) return rdzv_->abort(preflight_failure(me, findings));
    say_on_console(
        fmt::format("preflight passed: {} checked, MASTER_ADDR {} ({:.1f} ms)",
                    count_of(static_cast<long long>(a.preflight.size()), "node"), a.master_addr,
                    std::chrono::duration<double, std::milli>(took).count()),
        Level::debug);
    apply(policy_.assignment(a, Clock::now()));
  }

  void drop_preflight() {
    ++preflight_runs_;
    if (preflight_) preflight_->cancel();
    preflight_.reset();
  }

  // The other nodes' answers for `trainrun --stacks`, through the rendezvous.
  void ask_other_nodes(
      std::function<void(nlohmann::json nodes, nlohmann::json missing, std::string error)> done) {
    if (!rdzv_)
      return done(nlohmann::json::array(), nlohmann::json::array(),
                  "this node has left the rendezvous");
    rdzv_->request_stacks([done](std::vector<std::string> answers,
                                 std::vector<rendezvous::StacksMissing> missing,
                                 std::string error) {
      nlohmann::json nodes = nlohmann::json::array(), absent = nlohmann::json::array();
      // Decoded once already (a JSON object each): parsing cannot fail here.
      for (const auto& answer : answers) nodes.push_back(nlohmann::json::parse(answer));
      for (const auto& m : missing) absent.push_back({{"host", m.host}, {"reason", m.reason}});
      done(std::move(nodes), std::move(absent), std::move(error));
    });
  }

  // `trainrun --stacks` finds this job by its registration; a job that cannot register still runs.
  void start_roll_call() {
    JobEntry entry{::getpid(), job_.run_id, -1, host_, logs_.run_dir(), ""};
    try {
      roll_call_ = std::make_unique<RollCall>(io_, runtime_dir(::geteuid(), inherited_), entry,
                                              [this] { return node_workers(); });
    } catch (const LaunchError& e) {
      say_on_console(fmt::format("trainrun --stacks cannot reach this job: {}", e.what()),
                     Level::warning);
    }
  }

  // --hang-timeout: progress is any worker's output (every stream then passes through trainrun),
  // a touch of the heartbeat file, a file-timer request; a hang is confirmed with the roll call.
  void start_hang_watch() {
    if (config_.hang_timeout <= 0) return;
    if (!roll_call_) {
      say_on_console("--hang-timeout is off: without the roll call a hang cannot be confirmed",
                     Level::warning);
      return;
    }
    job_.heartbeat_file = logs_.run_dir() + "/heartbeat";
    if (!write_heartbeat_file()) job_.heartbeat_file.clear();
    HangWatch::Hooks hooks;
    hooks.roll_call = [this](HangWatch::Reply done) { roll_call_->job_reply(std::move(done)); };
    hooks.hung = [this](const HangReport& report) { on_hang(report); };
    hooks.say = [this](const std::string& line, Level level) { say_on_console(line, level); };
    hang_watch_ = std::make_unique<HangWatch>(io_, config_.hang_timeout, job_.heartbeat_file,
                                              std::move(hooks));
    supervisor_.set_progress([this] { hang_watch_->progress(); });
  }

  bool write_heartbeat_file() {
    try {
      write_file_atomically(job_.heartbeat_file, "");
      return true;
    } catch (const std::exception& e) {
      say_on_console(fmt::format("--hang-timeout: no heartbeat file for the workers: {}", e.what()),
                     Level::warning);
      return false;
    }
  }

  void on_hang(const HangReport& report) {
    if (policy_.state() != AgentPolicy::State::running) return;
    std::string text = launcher_line(
        fmt::format("the job is hung: no worker made progress for {:.0f} s (--hang-timeout={:g}) "
                    "and no rank's stack moved in {} s: {}",
                    report.json.value("quiet_s", 0.0), config_.hang_timeout,
                    kHangConfirmGap.count(), report.line),
        Level::error);
    text += report.text;
    nlohmann::json hang = report.json;
    const std::string file = fmt::format("{}/attempt_{}/hang.txt", logs_.run_dir(), attempt_);
    bool written = false;
    try {
      write_file_atomically(file, text);
      hang["report_file"] = file;
      written = true;
    } catch (const std::exception& e) {
      say_on_console(fmt::format("the hang report could not be written: {}", e.what()),
                     Level::warning);
    }
    consoles_.err().write(text);
    summary_.hang(std::move(hang));
    ProcessFailure failure;
    failure.rank = report.rank;
    failure.local_rank = report.local_rank;
    failure.pid = report.pid;
    failure.host = report.host.empty() ? host_ : report.host;
    failure.status = ExitStatus{kHangExitCode, 0};
    failure.timestamp = unix_time();
    failure.message = "hung: " + report.line;
    failure.traceback = failure.message;
    // The report stands as its error file: the summary shows the line, not a rank's stderr.
    failure.has_error_file = written;
    if (written) failure.error_file = file;
    apply(policy_.hang_confirmed(std::move(failure), Clock::now()));
  }

  NodeWorkers node_workers() const {
    NodeWorkers node{node_rank_, node_count_, host_, logs_.run_dir(), {}, std::nullopt};
    if (hang_watch_) node.quiet_s = hang_watch_->quiet_s();
    for (const auto& [local_rank, pid] : supervisor_.running_workers())
      node.workers.push_back({base_rank_ + local_rank, local_rank, pid});
    return node;
  }

  // TorchElastic's file timer, when the job asks for it as torchrun's: workers find its FIFO in
  // TORCHELASTIC_TIMER_FILE.
  void start_file_timer() {
    const auto path = file_timer_path(inherited_);
    if (!path) return;
    FileTimerServer::Hooks hooks;
    hooks.find_worker = [this](pid_t pid) -> std::optional<FileTimerServer::Worker> {
      const auto local_rank = supervisor_.local_rank_of(pid);
      if (!local_rank) return std::nullopt;
      return FileTimerServer::Worker{base_rank_ + *local_rank, *local_rank};
    };
    hooks.dump_dir = [this] {
      return fmt::format("{}/attempt_{}/timer_expired", logs_.run_dir(), attempt_);
    };
    hooks.say = [this](const std::string& line, Level level) { say_on_console(line, level); };
    hooks.write = [this](const std::string& text) { consoles_.err().write(text); };
    hooks.request = [this] {
      if (hang_watch_) hang_watch_->progress();
    };
    file_timer_ = std::make_unique<FileTimerServer>(io_, *path, std::move(hooks));
    inherited_[kTimerFileVariable] = *path;
  }

  void wait_for_signal() {
    signals_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        supervisor_.reap();
      } else {
        stopped_by_signal_ = true;
        apply(policy_.signal(sig, Clock::now()));
      }
      if (!policy_.done()) wait_for_signal();
    });
  }

  void on_worker_exit(int local_rank, pid_t pid, ExitStatus status) {
    const std::string rank_dir = logs_.rank_dir(attempt_, local_rank);
    const std::string error_file = error_file_in(rank_dir);
    const OutputPlan output = plan_output(config_, local_rank, rank_dir);
    WorkerExit exit{local_rank,   pid, status,          unix_time(),    error_file,
                    std::nullopt, "",  output.out.file, output.err.file};
    if (status.failed()) exit.contents = read_error_file(exit.error_file, &exit.problem);
    summary_.worker_exited(local_rank, pid, status, exit.seen_at, exit.contents ? error_file : "",
                           exit.contents ? exit.contents->message : "", exit.stdout_log,
                           exit.stderr_log);
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
    node_rank_ = a.topology.group_rank;
    node_count_ = a.topology.group_world_size;
    if (roll_call_) roll_call_->set_node_rank(node_rank_);
    job_.max_restarts = a.max_restarts;
    summary_.attempt_started(a.topology, unix_time());
    say_on_console(attempt_line(a.topology, config_.nproc_per_node.number), Level::debug);
    std::vector<WorkerLaunch> launches;
    try {
      store_.attempt_starting(job_, a.topology);
      for (int lr = 0; lr < config_.nproc_per_node.number; ++lr) {
        const std::string rank_dir = logs_.make_rank_dir(attempt_, lr);
        ::unlink(error_file_in(rank_dir).c_str());
        launches.push_back(
            worker_launch(config_, program_, a.topology, job_, lr, rank_dir, host_, inherited_));
        if (static_cast<size_t>(lr) < numa_.cpus.size())
          launches.back().cpus = numa_.cpus[static_cast<size_t>(lr)];
        // The hang watch sees progress in the output that passes through trainrun: all of it.
        if (capture_stderr_ || hang_watch_) capture_inherited(launches.back().output.err);
        if (hang_watch_) capture_inherited(launches.back().output.out);
      }
      supervisor_.start(launches,
                        [this](int lr, pid_t pid, ExitStatus st) { on_worker_exit(lr, pid, st); });
      if (hang_watch_) hang_watch_->start();
    } catch (const LaunchError& e) {
      apply(policy_.start_failed(e.what(), e.exit_code(), Clock::now()));
    } catch (const std::exception& e) {
      // Anything else that stops a worker from starting (memory, a system call) is a spawn error.
      const SpawnError error(e.what());
      apply(policy_.start_failed(error.what(), error.exit_code(), Clock::now()));
    }
  }
  void carry_out(const action::SignalWorkers& a) {
    // A stop for a failure (a hang, found here or on another node) of Python workers that have
    // been quiet for the hang timeout: SIGABRT first, so that faulthandler writes every thread's
    // traceback to their stderr. Not to a user's stop signal: their handlers expect SIGTERM.
    if (a.signal == SIGTERM && !stopped_by_signal_ && job_.python_workers && hang_watch_ &&
        hang_watch_->suspected()) {
      say_on_console("stopping the Python workers with SIGABRT: their tracebacks follow on stderr",
                     Level::warning);
      supervisor_.signal_workers(SIGABRT);
      return;
    }
    if (a.whole_group)
      supervisor_.signal_all(a.signal);
    else
      supervisor_.signal_workers(a.signal);
  }
  void carry_out(const action::ArmGraceTimer& a) {
    store_.attempt_stopping();  // armed once per stop of an attempt
    grace_timer_.expires_at(a.deadline);
    grace_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) apply(policy_.grace_expired(Clock::now()));
    });
  }
  void carry_out(const action::Sweep& a) {
    grace_timer_.cancel();
    if (hang_watch_) hang_watch_->stop();
    supervisor_.finish(a.grace, [this] {
      for (int lr = 0; lr < config_.nproc_per_node.number; ++lr)
        policy_.stderr_tail(lr, supervisor_.stderr_tail(lr));
      summary_.attempt_ended(policy_.failures(), unix_time());
      apply(policy_.attempt_ended(Clock::now()));
    });
  }
  void carry_out(const action::Join&) {
    rendezvous::RendezvousHandler::JoinRequest request;
    request.nproc = config_.nproc_per_node.number;
    request.master_port = port_ ? port_->port() : 0;
    request.preferred_rank = preferred_rank();
    request.last_rank = node_rank_;
    request.preflight = offer_;
    rdzv_->join(request);
  }
  void carry_out(const action::ReportFailure& a) {
    rdzv_->report_failure(a.failure, a.failures, a.not_relayed);
  }
  void carry_out(const action::ReportEnded& a) { rdzv_->report_ended(a.failures, a.not_relayed); }
  void carry_out(const action::ReportDone&) { rdzv_->report_done(); }
  void carry_out(const action::ShutdownRendezvous& a) { rdzv_->shutdown(a.reason); }
  void carry_out(const action::Say& a) { say_on_console(a.line, a.level); }
  void carry_out(const action::WriteSummary& a) {
    consoles_.err().write(a.text);
    // Where the logs and NCCL's flight recorder dumps are, once, after the (first) summary.
    if (dumps_listed_) return;
    dumps_listed_ = true;
    // The job is over: a directory left empty goes now, so the line names only what holds files.
    logs_.remove_if_empty();
    if (directory_exists(logs_.run_dir()))
      say_on_console("log directory: " + logs_.run_dir(), Level::error);
    const std::string dumps = flight_recorder_line(flight_recorder_dumps(logs_.run_dir()));
    if (!dumps.empty()) say_on_console(dumps, Level::error);
    if (!job_.python_workers) return;
    if (const auto rank = rank_without_torch(policy_.failures())) {
      workers_python_version();
      say_on_console(missing_torch_hint(*rank, python_), Level::error);
    }
  }
  void carry_out(const action::Finish& a) {
    exit_code_ = a.exit_code;
    ended_ = Clock::now();
    if (roll_call_) roll_call_->close();
    if (hang_watch_) hang_watch_->stop();
    drop_preflight();
    // Its accept would keep the rendezvous' last run_for busy for the whole close linger.
    preflight_listener_.reset();
    signals_.cancel();
    grace_timer_.cancel();
    file_timer_.reset();  // its FIFO's wait would keep the rendezvous' last run_for busy
    io_.stop();
  }

  // trainrun's own lines go through the console while the loop runs: they keep their place among
  // the workers' lines, and a paused reader cannot block the event loop on them.
  void say_on_console(const std::string& line, Level level = Level::info) {
    const std::string text = launcher_line(line, level);
    if (!text.empty()) consoles_.err().write(text);
  }

  // A dynamic job's --node-rank asks for a node rank; a static job's is the node rank.
  int preferred_rank() const {
    return config_.node_rank_given && config_.rdzv_backend != RendezvousBackend::static_
               ? config_.node_rank
               : -1;
  }

  // Once per job, on a multi-node job: which node this is and the address the others reach it by.
  void announce_node(const rendezvous::Assignment& a) {
    if (announced_ || (a.group_world_size <= 1 && config_.max_nodes <= 1)) return;
    announced_ = true;
    say_on_console(node_line(a, host_, rdzv_->advertised_address()));
  }

  void write_summary(int exit_code, const std::string& error = {}) {
    write_summary_file(config_.summary_file, summary_, exit_code, error);
  }

  LaunchConfig config_;
  std::string program_;
  Watchdog& watchdog_;
  asio::io_context io_;
  AgentConsoles consoles_{io_};
  Supervisor supervisor_{io_, watchdog_, consoles_.out(), consoles_.err()};
  asio::signal_set signals_{io_};
  AgentStore store_{io_,
                    [this](const std::string& line, Level level) { say_on_console(line, level); }};
  asio::steady_timer grace_timer_{io_};
  std::map<std::string, std::string> inherited_ = current_environment();
  std::string host_;
  JobSettings job_;
  LogDir logs_;
  std::optional<HeldPort> port_;
  std::unique_ptr<rendezvous::RendezvousHandler> rdzv_;
  std::unique_ptr<RollCall> roll_call_;
  std::unique_ptr<FileTimerServer> file_timer_;
  std::unique_ptr<HangWatch> hang_watch_;  // with --hang-timeout
  std::unique_ptr<PreflightListener> preflight_listener_;
  std::optional<rendezvous::PreflightOffer> offer_;  // none: this node runs no preflight
  std::shared_ptr<PreflightRun> preflight_;          // while the round's preflight runs
  std::uint64_t preflight_runs_ = 0;                 // counts runs begun or dropped
  std::string torch_version_;                        // the workers' torch, "" when none
  AgentPolicy policy_;
  JobSummary summary_;
  PythonExec python_;
  NumaPlan numa_;  // --numa-binding: each local rank's CPUs, planned once
  // Workers' stderr goes through trainrun, unchanged, so that a failure can show its last lines;
  // on a terminal it stays the workers' own (colours, progress bars: docs/cli.md).
  bool capture_stderr_ = ::isatty(STDERR_FILENO) == 0;
  std::string kept_logs_;  // said at exit: why a temporary log directory stays
  bool announced_ = false;
  bool dumps_listed_ = false;
  bool stopped_by_signal_ = false;  // a stop signal reached trainrun: its stop is the user's
  int base_rank_ = 0;               // the running attempt's RANK of local rank 0
  int node_rank_ = -1;
  int node_count_ = 1;
  int attempt_ = 0;  // the running attempt's restart count: where its rank directories are
  int exit_code_ = 0;
  std::optional<Clock::time_point> ended_;
};

}  // namespace

int run_job(const LaunchConfig& config, const std::string& program, Watchdog& watchdog) {
  Agent agent(config, program, watchdog);
  return agent.run();
}

}  // namespace trainrun::launch
