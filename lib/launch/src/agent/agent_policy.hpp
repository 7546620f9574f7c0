#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent_actions.hpp"
#include "agent_events.hpp"
#include "attempt_failures.hpp"
#include "stop_orders.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// One node's decisions as a pure machine: when to start, stop, escalate, restart, report or
// finish. Events and the current time go in, actions come out; it owns no process, socket or
// clock, so the agent only carries the actions out and tests drive it with a fake clock.
// Actions are carried out in the order given. The state is settled before handle() returns, and
// an event raised while its actions are carried out (a Sweep with nothing left to wait for ends
// the attempt at once) is handled after the last of them: handle() is never re-entered.
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

  // What `event` (agent_events.hpp) means at `now`: the actions, in order.
  AgentActions handle(const AgentEvent& event, Clock::time_point now);

  State state() const { return state_; }
  bool done() const { return state_ == State::done; }
  int restart_count() const { return topology_.restart_count; }
  size_t running() const { return running_; }
  const std::vector<ProcessFailure>& failures() const { return failures_.list(); }
  // The attempt's failures as `ended` leaves them (its workers' stderr tails added), for the job
  // summary before the policy handles it (a restart clears them).
  std::vector<ProcessFailure> failures(const event::AttemptEnded& ended) const;

 private:
  AgentActions on(const event::StartSingleNode& e, Clock::time_point now);
  AgentActions on(const event::StartInJob& e, Clock::time_point now);
  AgentActions on(const event::StartFailed& e, Clock::time_point now);
  AgentActions on(const event::StartCancelled& e, Clock::time_point now);
  AgentActions on(const event::WorkerExited& e, Clock::time_point now);
  AgentActions on(const event::HangConfirmed& e, Clock::time_point now);
  AgentActions on(const event::AttemptEnded& e, Clock::time_point now);
  AgentActions on(const event::Signal& e, Clock::time_point now);
  // As the stop signal it names: the job is stopped from outside.
  AgentActions on(const event::LauncherLost& e, Clock::time_point now) {
    return on(event::Signal{e.sig}, now);
  }
  AgentActions on(const event::GraceExpired& e, Clock::time_point now);
  AgentActions on(const event::RoundFormed& e, Clock::time_point now);
  AgentActions on(const event::Assignment& e, Clock::time_point now);
  AgentActions on(const event::PreflightFailed& e, Clock::time_point now);
  AgentActions on(const event::Restart& e, Clock::time_point now);
  AgentActions on(const event::Stop& e, Clock::time_point now);
  AgentActions on(const event::Halt& e, Clock::time_point now);
  // Start-up times are the start-up record's to keep (startup_record.hpp): nothing to decide.
  AgentActions on(const event::ReachedStore&, Clock::time_point) { return {}; }
  AgentActions on(const event::WorkersStarted&, Clock::time_point) { return {}; }
  AgentActions on(const event::FirstOutput&, Clock::time_point) { return {}; }
  AgentActions on(const event::StoreOwnersNamed&, Clock::time_point) { return {}; }

  void start_attempt(AgentActions& out);
  void begin_stop(AgentActions& out, int sig, Clock::time_point now);
  void after_attempt(AgentActions& out);
  void finish(AgentActions& out, int exit_code);
  void drop_checks(AgentActions& out);
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
  int start_failed_ = 0;          // the exit status when the group could not be started, else 0
  bool ran_ = false;              // a group was started at least once
  bool checking_ = false;         // the round's preflight checks run (CheckRound, no verdict yet)
  bool signal_received_ = false;  // a stop or forwarded signal (or a lost launcher) came
  StopOrders stop_orders_;
  Clock::time_point grace_deadline_;
};

}  // namespace trainrun::launch
