#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/failure.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What the policy asks the agent to do, in order.
namespace action {
// Start the group: one worker per local rank with this topology.
struct StartWorkers {
  Topology topology;
  int max_restarts = 0;  // TORCHELASTIC_MAX_RESTARTS: the job's, once the rendezvous has said it
};
// Signal every worker still running: with `whole_group`, everything in its process group (its
// DataLoader's processes too); without, the worker process alone.
struct SignalWorkers {
  int signal = 0;
  bool whole_group = true;
};
// Call grace_expired() at `deadline` (replaces an earlier timer).
struct ArmGraceTimer {
  std::chrono::steady_clock::time_point deadline;
};
// Every worker has ended: stop what they left (SIGKILL after `grace` seconds), drain their
// output, then call attempt_ended().
struct Sweep {
  double grace = 0;
};
// Join the rendezvous' next round.
struct Join {};
struct ReportFailure {
  rendezvous::FailureReport failure;
  std::vector<rendezvous::WorkerFailure> failures;  // this node's, as relayed_failures gives them
  int not_relayed = 0;
};
// After a halt, every worker has ended: tell the rendezvous what failed (perhaps nothing).
struct ReportEnded {
  std::vector<rendezvous::WorkerFailure> failures;
  int not_relayed = 0;
};
// All of this node's workers succeeded: wait at the exit barrier.
struct ReportDone {};
struct ShutdownRendezvous {
  std::string reason;
};
// One line of trainrun's own ("trainrun: " is added), on stderr, shown as its level allows.
struct Say {
  std::string line;
  Level level = Level::info;
};
// A failure summary, as it is, on stderr.
struct WriteSummary {
  std::string text;
};
// The job is over for this node: stop the event loop and exit with `exit_code`.
struct Finish {
  int exit_code = 0;
};
}  // namespace action

using AgentAction =
    std::variant<action::StartWorkers, action::SignalWorkers, action::ArmGraceTimer, action::Sweep,
                 action::Join, action::ReportFailure, action::ReportEnded, action::ReportDone,
                 action::ShutdownRendezvous, action::Say, action::WriteSummary, action::Finish>;
using AgentActions = std::vector<AgentAction>;

// A worker's end, with what the agent read of its error file (only when it failed).
struct WorkerExit {
  int local_rank = 0;
  pid_t pid = 0;
  ExitStatus status;
  double seen_at = 0;      // unix seconds, when the exit was seen
  std::string error_file;  // the worker's TORCHELASTIC_ERROR_FILE
  std::optional<ErrorFileContents> contents;
  std::string problem;     // why the error file could not be read, if it could not
  std::string stdout_log;  // its log files, empty for a stream not sent to one
  std::string stderr_log;
};

// One node's decisions as a pure machine: when to start, stop, escalate, restart, report or
// finish. Events and the current time go in, actions come out; it owns no process, socket or
// clock, so the agent only carries the actions out and tests drive it with a fake clock.
// Actions are carried out in the order given. The state is settled before an event returns, so
// carrying an action out may deliver the next event at once (a Sweep with nothing left to wait
// for calls attempt_ended() from inside).
class AgentPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  // idle: no workers (before the first round, between rounds); running; stopping: a stop signal
  // was sent to the group; finishing: every worker has ended, what they left is being swept;
  // done: Finish was returned.
  enum class State { idle, running, stopping, finishing, done };

  // `one_node_master_addr`: MASTER_ADDR when the job only ever has this node (--nnodes=1), as
  // one_node_master_addr() in agent_plan.hpp gives it; empty: the config's or the rendezvous'.
  AgentPolicy(LaunchConfig config, std::string host, std::string one_node_master_addr = {});

  // Without a rendezvous: one node, its own topology, worker RANK 0's store on `master_port`.
  AgentActions start_single_node(int master_port, Clock::time_point now);
  // With a rendezvous: join the first round and wait for an assignment.
  AgentActions start_in_job(Clock::time_point now);
  // StartWorkers could not start the group (the supervisor has killed what it started); the
  // node exits with `exit_code` (126/127 for an entrypoint that cannot run, as a shell).
  AgentActions start_failed(const std::string& reason, int exit_code, Clock::time_point now);
  AgentActions worker_exited(const WorkerExit& exit, Clock::time_point now);
  // After Sweep: nothing of the attempt's workers is left.
  AgentActions attempt_ended(Clock::time_point now);
  // A stop or forwarded signal (the agent reaps on SIGCHLD itself).
  AgentActions signal(int sig, Clock::time_point now);
  AgentActions grace_expired(Clock::time_point now);
  // The rendezvous' decisions for the whole job.
  AgentActions assignment(const rendezvous::Assignment& a, Clock::time_point now);
  AgentActions restart(const rendezvous::Restart& r, Clock::time_point now);
  AgentActions stop(const rendezvous::Stop& s, Clock::time_point now);
  // A failure ends the job: stop the workers and say what failed; the stop follows.
  AgentActions halt(const rendezvous::Halt& h, Clock::time_point now);

  State state() const { return state_; }
  bool done() const { return state_ == State::done; }
  int restart_count() const { return topology_.restart_count; }
  size_t running() const { return running_; }
  const std::vector<ProcessFailure>& failures() const { return failures_; }
  // The last lines of the stderr of the attempt's worker `local_rank`, known once its output is
  // read to the end (before attempt_ended): shown in its failure, when it wrote no error file.
  void stderr_tail(int local_rank, const std::string& tail);

 private:
  void start_attempt(AgentActions& out);
  bool counts_as_failure(const ExitStatus& status) const;
  void record_failure(AgentActions& out, const WorkerExit& exit, bool first_wave);
  void report_failure(AgentActions& out);
  void begin_stop(AgentActions& out, int sig, Clock::time_point now);
  void after_attempt(AgentActions& out);
  void after_attempt_in_job(AgentActions& out);
  void fail_with_summary(AgentActions& out);
  void fail_with_job_summary(AgentActions& out, const rendezvous::Stop& s);
  void finish(AgentActions& out, int exit_code);
  bool forwarded(int sig) const;

  LaunchConfig config_;
  std::string host_;
  std::string one_node_master_addr_;
  bool in_job_ = false;  // a rendezvous decides restarts and the end of the job
  State state_ = State::idle;
  Topology topology_;
  int max_restarts_ = 0;
  size_t running_ = 0;
  std::vector<ProcessFailure> failures_;
  bool reported_ = false;
  int start_failed_ = 0;  // the exit status when the group could not be started, else 0
  bool ran_ = false;      // a group was started at least once
  bool pending_restart_ = false;
  std::optional<rendezvous::Stop> pending_stop_;
  bool halted_ = false;  // the rendezvous asked what failed; the answer is owed once stopped
  int stop_signal_ = 0;
  Clock::time_point grace_deadline_;
};

}  // namespace trainrun::launch
