#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trainrun/launch/agent/agent_actions.hpp"
#include "trainrun/launch/agent/attempt_failures.hpp"
#include "trainrun/launch/agent/stop_orders.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

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
  // The job was found hung (--hang-timeout): `hang` is the attempt's failure (its status the hang
  // exit code), reported and stopped for as a worker's failure. Only while the group runs.
  AgentActions hang_confirmed(ProcessFailure hang, Clock::time_point now);
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
  const std::vector<ProcessFailure>& failures() const { return failures_.list(); }
  // The last lines of the stderr of the attempt's worker `local_rank`, known once its output is
  // read to the end (before attempt_ended): shown in its failure, when it wrote no error file.
  void stderr_tail(int local_rank, const std::string& tail) {
    failures_.stderr_tail(local_rank, tail);
  }

 private:
  void start_attempt(AgentActions& out);
  void begin_stop(AgentActions& out, int sig, Clock::time_point now);
  void after_attempt(AgentActions& out);
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
  AttemptFailures failures_;
  int start_failed_ = 0;  // the exit status when the group could not be started, else 0
  bool ran_ = false;      // a group was started at least once
  StopOrders stop_orders_;
  Clock::time_point grace_deadline_;
};

}  // namespace trainrun::launch
