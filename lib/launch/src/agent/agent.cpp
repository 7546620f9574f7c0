#include "trainrun/launch/agent/agent.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "agent_consoles.hpp"
#include "agent_event_queue.hpp"
#include "agent_events.hpp"
#include "agent_plan.hpp"
#include "agent_policy.hpp"
#include "agent_preflight.hpp"
#include "agent_rendezvous.hpp"
#include "agent_signals.hpp"
#include "agent_store.hpp"
#include "agent_watch.hpp"
#include "agent_workers.hpp"
#include "attempt_startup.hpp"
#include "connection_owner.hpp"
#include "file_timer_server.hpp"
#include "job_logs.hpp"
#include "job_summary.hpp"
#include "startup_record.hpp"
#include "store_asker.hpp"
#include "store_owners.hpp"
#include "trainrun/base/off_loop.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/hosts/remote_agent.hpp"
#include "trainrun/launch/output/console.hpp"
#include "trainrun/launch/output/log_dir.hpp"
#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"
#include "trainrun/launch/workers/descriptors.hpp"
#include "trainrun/launch/workers/flight_recorder.hpp"
#include "trainrun/launch/workers/port.hpp"
#include "trainrun/launch/workers/python_exec.hpp"
#include "trainrun/launch/workers/python_torch.hpp"
#include "trainrun/launch/workers/supervisor.hpp"
#include "trainrun/launch/workers/watchdog.hpp"
#include "trainrun/launch/workers/worker_count.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "worker_group_launch.hpp"
#include "workers_python.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

using Clock = AgentPolicy::Clock;

// The directory trainrun was started in, for `trainrun --stacks` to tell jobs apart by; "" when
// it is gone.
std::string current_directory() {
  char buffer[4096];
  return ::getcwd(buffer, sizeof buffer) ? buffer : "";
}

// The entrypoint and its arguments, as the user gave them.
std::string job_command(const LaunchConfig& config) {
  std::string out = config.entrypoint;
  for (const auto& arg : config.entry_args) out += " " + arg;
  return out;
}

// Looked up only for a job that only ever has this node (a resolver may be slow).
std::string master_addr_alone(const LaunchConfig& config) {
  if (config.max_nodes != 1) return {};
  return one_node_master_addr(config, [] {
    const std::string name = fully_qualified_host_name();
    return names_this_machine(name) ? name : std::string();
  });
}

// Another node's question through the roll call, about the store's connections of `startup`'s
// attempt (none: between attempts); one not known is answered with an error.
std::string answer_question(const std::string& question,
                            const std::optional<AttemptStartup>& startup,
                            const NodeWorkers& workers) {
  try {
    const auto q = nlohmann::json::parse(question);
    if (!is_store_owners_question(q)) return R"({"error": "this node does not know the question"})";
    const std::optional<int> attempt =
        startup ? std::optional<int>(startup->topology.restart_count) : std::nullopt;
    return answer_store_owners(parse_store_owners_question(q),
                               startup ? startup->topology.group_rank : -1, attempt, workers)
        .dump();
  } catch (const std::exception& e) {
    return nlohmann::json{{"error", fmt::format("the question was not read: {}", e.what())}}.dump();
  }
}

// One node's life on one io_context. What to do is AgentPolicy's to decide: the agent's parts
// raise events (worker exits, signals, timers, the rendezvous, the preflight, the launcher's
// channel, the hang watch), the agent handles each in turn: the job summary and the start-up
// record (StartupRecord) keep what they need of it, the policy decides, and the agent carries out
// the actions it returns, each then shown to the start-up record.
class Agent {
 public:
  Agent(const LaunchConfig& config, std::string program, Watchdog& watchdog, int launcher_channel)
      : launcher_channel_(launcher_channel),
        config_(config),
        program_(std::move(program)),
        watchdog_(watchdog),
        host_(host_name()),
        policy_(config, host_, master_addr_alone(config)),
        summary_(host_, config.entrypoint, config.entry_args, unix_time()) {}

  int run() {
    int code;
    try {
      code = run_job();
    } catch (const LaunchError& e) {
      write_summary(e.exit_code(), e.what());
      throw;
    }
    // Counted from the end of the job: the rendezvous' last messages take from the same time.
    consoles_.flush(signals_.set(), config_.stop_signals, ended_.value_or(Clock::now()));
    if (!logs_.kept_line().empty()) say(logs_.kept_line());
    write_summary(code);
    return code;
  }

 private:
  int run_job() {
    // As torchrun 2.x, which gives such a job a fresh id; a --rdzv-id given is kept.
    const bool fresh_id =
        config_.standalone || (standalone_in_torchrun(config_) && config_.rdzv_id == "none");
    job_ = job_settings(config_, fresh_id ? random_run_id() : config_.rdzv_id);
    job_.python_workers = runs_python(program_);
    if (job_.python_workers) job_.torch = python_.inspect(consoles_.sayer());
    if (config_.no_diagnosis && wants_diagnosis_channel(config_, job_))
      consoles_.say(no_diagnosis_line());
    job_.use_agent_store = uses_agent_store(config_, job_, inherited_);
    startup_.set_agent_store(job_.use_agent_store);
    job_.may_use_nccl = count_nvidia_gpus() > 0;
    workers_.plan_numa(inherited_);
    std::optional<rendezvous::TcpRendezvousOptions> rdzv_options;
    if (uses_rendezvous(config_)) {
      rdzv_options = rendezvous_options(config_, inherited_);
      rdzv_options->limits = server_limits_for(config_.nproc_per_node.number);
    }
    summary_.set_run_id(job_.run_id);
    logs_.create(job_.run_id);
    consoles_.say("log directory: " + logs_.dir().run_dir(), Level::debug);
    // If trainrun itself is killed, the watchdog finds this job's escaped descendants by it.
    watchdog_.mark_job_directory(logs_.dir().run_dir());
    watchdog_.set_log_tree(logs_.dir().own_root());
    try {
      start_watch();
      if (auto port = port_to_hold(config_, rdzv_options.has_value())) port_.emplace(*port);
      if (rdzv_options && config_.preflight != PreflightMode::off && config_.max_nodes > 1)
        open_preflight();
      if (rdzv_options) start_rendezvous(*rdzv_options);
      workers_.start_file_timer(inherited_, [this] { watch_->progress(); });
    } catch (const LaunchError&) {
      logs_.dir().remove_if_empty();
      throw;
    }

    signals_.watch(
        config_, [this] { workers_.reap(); }, raiser());
    if (launcher_channel_ >= 0)
      launcher_.emplace(io_, std::exchange(launcher_channel_, -1), config_.stop_signals,
                        [this](int sig) { raise(event::LauncherLost{sig}); });
    if (rdzv_options)
      raise(event::StartInJob{});
    else
      asio::post(io_, [this] { raise(event::StartSingleNode{port_->port()}); });
    io_.run();
    store_.close();
    if (rdzv_) rdzv_->leave();
    if (!job_.heartbeat_file.empty()) ::unlink(job_.heartbeat_file.c_str());
    summary_.set_log_dir(logs_.end(exit_code_, workers_.attempt(),
                                   !consoles_.out().closed() && !consoles_.err().closed(),
                                   watch_->unasked_dumps()));
    return exit_code_;
  }

  // Throws SetupError when this node must host the rendezvous and cannot.
  void start_rendezvous(const rendezvous::TcpRendezvousOptions& options) {
    rdzv_ = std::make_unique<AgentRendezvous>(
        io_, config_, host_, [this](const std::string& line) { consoles_.say(line); });
    watch_->set_ask_others([this](auto done) { rdzv_->ask_others(std::move(done)); });
    rdzv_->start(options, raiser(), [this](std::string question, auto reply) {
      if (question.empty())
        return watch_->answer(std::move(reply), rendezvous::kMaxStacksAnswerBytes);
      reply(answer_question(question, startup_.current(), workers_.node_workers()));
    });
  }

  // The preflight's port, open for the job's life, and this node's offer, sent with each join.
  void open_preflight() {
    AgentPreflight::Hooks hooks;
    hooks.say = consoles_.sayer();
    hooks.failed = [this](const std::string& line) { raise(event::PreflightFailed{line}); };
    preflight_.open(
        // The interpreter by version and path: one of the same version elsewhere may lack torch.
        preflight_local_run(
            config_, program_,
            job_.python_workers ? fmt::format("{} ({})", python_.version(), python_.program()) : "",
            job_.python_workers ? python_.torch_version() : ""),
        std::move(hooks), raiser());
  }

  // `trainrun --stacks` and --hang-timeout: the roll call, and the watch that uses it.
  void start_watch() {
    AgentWatch::Hooks hooks;
    hooks.workers = [this] { return workers_.node_workers(); };
    hooks.say = consoles_.sayer();
    watch_ = std::make_unique<AgentWatch>(
        io_, inherited_,
        JobEntry{::getpid(), job_.run_id, -1, host_, logs_.dir().run_dir(), "",
                 job_command(config_), current_directory(), unix_time(), config_.entrypoint,
                 !uses_rendezvous(config_)},
        config_.hang_timeout, logs_.heartbeat_path(), std::move(hooks), raiser());
    job_.heartbeat_file = watch_->heartbeat_file();
    if (watch_->watching()) workers_.set_progress([this] { watch_->progress(); });
  }

  // The one way in for the parts' events. One raised while an event's actions are carried out
  // (a group that cannot start, a sweep with nothing left to wait for) is handled after them.
  void raise(AgentEvent e) {
    events_.raise(std::move(e), [this](const AgentEvent& next) {
      const StartupRecord::Instant now = StartupRecord::Instant::now();
      summary_.on(next);
      std::visit([this](const auto& x) { note(x); }, next);
      startup_.on(next, now);
      for (const AgentAction& a : policy_.handle(next, now.at)) {
        std::visit([this](const auto& x) { carry_out(x); }, a);
        startup_.on(a, now);
      }
    });
  }
  RaiseEvent raiser() {
    return [this](AgentEvent e) { raise(std::move(e)); };
  }

  // What the agent itself writes or keeps of an event, before the policy decides on it.
  template <class Event>
  void note(const Event&) {}
  void note(const event::HangConfirmed& e) { consoles_.err().write(e.hang.text); }
  void note(const event::AttemptEnded& e) {
    summary_.attempt_ended(policy_.failures(e), unix_time());
    store_asker_.attempt_over();
  }

  void carry_out(const action::StartWorkers& a) {
    watch_->set_node_rank(a.topology.group_rank);
    job_.max_restarts = a.max_restarts;
    summary_.attempt_started(a.topology, unix_time());
    if (job_.use_agent_store && a.topology.group_rank == 0)
      store_asker_.attempt_started(a.topology);
    // The store (on group rank 0) is ready before any worker of the attempt starts.
    workers_.start(
        a.topology, job_, inherited_, watch_->watching(),
        [&] { store_.attempt_starting(job_, a.topology); },
        [this, restart_count = a.topology.restart_count] {
          raise(event::WorkersStarted{restart_count, workers_.started(), Clock::now()});
          watch_->start(workers_.attempt_path("hang.txt"));
        });
  }
  // Which of this node's workers, if any, a connection to the store comes from, looked up off the
  // loop (through each worker's descriptors: milliseconds on a node of many workers), so that the
  // store answers meanwhile. Another node's, a stranger's: the other nodes are asked (StoreAsker).
  void reached_store(const asio::ip::tcp::endpoint& peer, const asio::ip::tcp::endpoint& local) {
    const Clock::time_point at = Clock::now();
    const int attempt = startup_.current() ? startup_.current()->topology.restart_count : -1;
    owner_lookups_.run(
        [peer, local, workers = workers_.node_workers()] {
          return connection_rank(peer, local, workers);
        },
        [this, peer, local, at, attempt](std::optional<int> rank) {
          raise(event::ReachedStore{rank, at, attempt});
          if (!rank && startup_.current() &&
              startup_.current()->topology.restart_count == attempt)
            store_asker_.unnamed({peer, local}, startup_.since_began(at));
        });
  }
  void carry_out(const action::SignalWorkers& a) {
    workers_.signal(a, a.failure_stop && job_.python_workers && watch_->suspected());
  }
  void carry_out(const action::ArmGraceTimer& a) {
    store_.attempt_stopping();
    // A hang found from now on is not the attempt's failure: the policy stops for one only
    // while the group runs.
    watch_->stop();
    workers_.arm_grace(a);
  }
  void carry_out(const action::Sweep& a) {
    watch_->stop();
    workers_.sweep(a);
  }
  void carry_out(const action::Join&) {
    rdzv_->join(port_ ? port_->port() : 0, workers_.node_rank(), preflight_.offer());
  }
  void carry_out(const action::StoreForRound& a) {
    store_.attempt_stopping();
    store_.round_formed(a.node_addresses);
  }
  // A node whose preflight port could not open checks nothing: its round passes at once.
  void carry_out(const action::CheckRound& a) {
    const rendezvous::Assignment& round = a.assignment;
    const PreflightNode me{host_, round.group_rank, rdzv_->handler().advertised_address()};
    if (!preflight_.start(round, me, logs_.dir().run_dir())) raise(event::Assignment{round});
  }
  void carry_out(const action::DropChecks&) { preflight_.drop(); }
  void carry_out(const action::ReportFailure& a) {
    rdzv_->handler().report_failure(a.failure, a.failures, a.not_relayed);
  }
  void carry_out(const action::ReportEnded& a) {
    rdzv_->handler().report_ended(a.failures, a.not_relayed);
  }
  void carry_out(const action::ReportDone&) { rdzv_->handler().report_done(); }
  void carry_out(const action::ShutdownRendezvous& a) { rdzv_->handler().shutdown(a.reason); }
  void carry_out(const action::AbortRendezvous& a) { rdzv_->handler().abort(a.reason); }
  void carry_out(const action::Say& a) { consoles_.say(a.line, a.level); }
  void carry_out(const action::WriteSummary& a) {
    consoles_.err().write(a.text);
    // Where the logs and NCCL's flight recorder dumps are, once, after the (first) summary.
    if (dumps_listed_) return;
    dumps_listed_ = true;
    for (const std::string& line : logs_.after_summary(workers_.attempt()))
      consoles_.say(line, Level::error);
    if (!job_.python_workers) return;
    if (const auto rank = rank_without_torch(policy_.failures()))
      consoles_.say(python_.missing_torch_hint(*rank), Level::error);
  }
  void carry_out(const action::Finish& a) {
    exit_code_ = a.exit_code;
    ended_ = Clock::now();
    watch_->close();
    preflight_.close();
    signals_.cancel();
    if (launcher_) launcher_->cancel();
    workers_.cancel_grace();
    workers_.stop_file_timer();
    io_.stop();
  }

  void write_summary(int exit_code, const std::string& error = {}) {
    summary_.store_refused(store_.refused_connections());
    write_summary_file(config_.summary_file, summary_, exit_code, error);
  }

  int launcher_channel_;
  LaunchConfig config_;
  std::string program_;
  Watchdog& watchdog_;
  asio::io_context io_;
  AgentConsoles consoles_{io_};
  AgentSignals signals_{io_};
  AgentStore store_{io_,
                    [this](const std::string& line, Level level) { consoles_.say(line, level); },
                    [this](const auto& peer, const auto& local) { reached_store(peer, local); }};
  std::map<std::string, std::string> inherited_ = current_environment();
  std::string host_;
  JobSettings job_;
  JobLogs logs_{config_};
  std::optional<HeldPort> port_;
  std::unique_ptr<AgentRendezvous> rdzv_;
  std::unique_ptr<AgentWatch> watch_;
  std::optional<LauncherWatch> launcher_;
  AgentPreflight preflight_{io_, config_.preflight};
  AgentPolicy policy_;
  AgentEventQueue events_;
  JobSummary summary_;
  AgentWorkers workers_{io_, watchdog_, consoles_, config_, program_, host_, logs_, raiser()};
  WorkersPython python_{program_, config_.python_source};
  bool dumps_listed_ = false;
  StartupRecord startup_{StartupRecord::Hooks{
      [this](const AttemptStartup& s) { summary_.startup(s); }, consoles_.sayer(),
      [this](int restart_count, int local_rank) {
        return read_file(logs_.first_report_path(restart_count, local_rank));
      }}};
  StoreAsker store_asker_{io_,
                          [this](std::string question, auto bound, rendezvous::StacksDone done) {
                            rdzv_->handler().ask_others(std::move(question), bound,
                                                        std::move(done));
                          },
                          raiser()};
  int exit_code_ = 0;
  std::optional<Clock::time_point> ended_;
  // Last: its thread ends before what its results reach.
  OffLoop owner_lookups_{[this](std::function<void()> f) { asio::post(io_, std::move(f)); }};
};

}  // namespace

int run_job(const LaunchConfig& config, const std::string& program, Watchdog& watchdog,
            int launcher_channel) {
  Agent agent(config, program, watchdog, launcher_channel);
  return agent.run();
}

}  // namespace trainrun::launch
