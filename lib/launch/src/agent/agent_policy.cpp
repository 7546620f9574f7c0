#include "agent_policy.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "agent_plan.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::launch {

namespace {

// Each action is built in place (emplace_back, never push_back or an initializer list): GCC 12
// takes a variant moved from a temporary for maybe-uninitialized.
template <class... A>
AgentActions actions(A&&... a) {
  AgentActions out;
  out.reserve(sizeof...(a));
  (out.emplace_back(std::forward<A>(a)), ...);
  return out;
}

}  // namespace

AgentPolicy::AgentPolicy(LaunchConfig config, std::string host, std::string one_node_master_addr)
    : config_(std::move(config)),
      host_(std::move(host)),
      one_node_master_addr_(std::move(one_node_master_addr)),
      max_restarts_(config_.max_restarts),
      failures_(config_.entrypoint, host_) {}

AgentActions AgentPolicy::handle(const AgentEvent& event, Clock::time_point now) {
  return std::visit([&](const auto& e) { return on(e, now); }, event);
}

std::vector<ProcessFailure> AgentPolicy::failures(const event::AttemptEnded& ended) const {
  AttemptFailures failures = failures_;
  failures.stderr_tails(ended.stderr_tails);
  return failures.list();
}

AgentActions AgentPolicy::on(const event::StartSingleNode& e, Clock::time_point) {
  topology_ = single_node_topology(config_, one_node_master_addr_, e.master_port);
  AgentActions out;
  start_attempt(out);
  return out;
}

AgentActions AgentPolicy::on(const event::StartInJob&, Clock::time_point) {
  in_job_ = true;
  state_ = State::idle;
  return actions(action::Join{});
}

AgentActions AgentPolicy::on(const event::StartFailed& e, Clock::time_point) {
  AgentActions out = actions(action::Say{e.reason, Level::error});
  start_failed_ = e.exit_code != 0 ? e.exit_code : 1;
  running_ = 0;
  state_ = State::finishing;
  if (in_job_) out.emplace_back(action::ShutdownRendezvous{e.reason});
  out.emplace_back(action::Sweep{0});
  return out;
}

AgentActions AgentPolicy::on(const event::StartCancelled&, Clock::time_point) {
  AgentActions out;
  running_ = 0;
  if (state_ == State::running || state_ == State::stopping) {
    state_ = State::finishing;
    out.emplace_back(action::Sweep{0});
  }
  return out;
}

AgentActions AgentPolicy::on(const event::WorkerExited& e, Clock::time_point now) {
  const WorkerExit& exit = e.exit;
  AgentActions out;
  if (running_ > 0) --running_;
  if (exit.status.failed() && (state_ == State::running || stop_orders_.signal() == 0))
    if (auto warning = failures_.record(
            exit, topology_.base_rank,
            !exit.aborted && stop_orders_.counts_as_failure(exit.status, state_ == State::running,
                                                            !failures_.empty())))
      out.emplace_back(action::Say{std::move(*warning), Level::warning});
  if (state_ == State::running && exit.status.failed()) {
    if (in_job_)
      if (auto report = failures_.report()) out.emplace_back(std::move(*report));
    begin_stop(out, SIGTERM, now);
  }
  if (running_ == 0 && (state_ == State::running || state_ == State::stopping)) {
    state_ = State::finishing;
    out.emplace_back(action::Sweep{config_.shutdown_timeout});
  }
  return out;
}

AgentActions AgentPolicy::on(const event::HangConfirmed& e, Clock::time_point now) {
  AgentActions out;
  if (state_ != State::running) return out;
  failures_.add_hang(e.hang.failure);
  if (in_job_)
    if (auto report = failures_.report()) out.emplace_back(std::move(*report));
  begin_stop(out, SIGTERM, now);
  return out;
}

AgentActions AgentPolicy::on(const event::AttemptEnded& e, Clock::time_point) {
  failures_.stderr_tails(e.stderr_tails);
  AgentActions out;
  if (state_ != State::finishing) return out;
  if (start_failed_ != 0)
    finish(out, start_failed_);
  else
    after_attempt(out);
  return out;
}

AgentActions AgentPolicy::on(const event::Signal& e, Clock::time_point now) {
  const int sig = e.sig;
  signal_received_ = true;
  // A user signal (SIGUSR1: checkpoint now) is for the worker's handler; the processes it
  // started (a DataLoader's, Python's resource tracker) keep the default action, which kills.
  // SIGCONT cannot kill, and a stopped group needs all of it continued.
  if (forwarded(sig)) return actions(action::SignalWorkers{sig, sig == SIGCONT});
  if (state_ == State::stopping && stop_orders_.signal() != 0) {
    // Asked twice: no more grace.
    return actions(
        action::Say{fmt::format("received {} again; killing the workers now", signal_name(sig)),
                    Level::warning},
        action::SignalWorkers{SIGKILL, true, true});
  }
  if (state_ == State::finishing || state_ == State::done) return {};
  // Between rounds (waiting for the rendezvous, or at its exit barrier) there is nothing to stop.
  AgentActions out = actions(action::Say{
      state_ == State::idle
          ? fmt::format("received {}; no worker is running: {}", signal_name(sig),
                        in_job_ ? "leaving the rendezvous" : "exiting")
          : fmt::format("received {}; stopping {} ({} s grace before SIGKILL)", signal_name(sig),
                        count_of(static_cast<long long>(running_), "worker"),
                        config_.shutdown_timeout)});
  stop_orders_.on_signal(sig);
  if (in_job_)
    out.emplace_back(
        action::ShutdownRendezvous{fmt::format("{} stopped by {}", host_, signal_name(sig))});
  if (state_ == State::idle)
    finish(out, shell_code_for_signal(sig));
  else
    begin_stop(out, sig, now);
  return out;
}

AgentActions AgentPolicy::on(const event::GraceExpired&, Clock::time_point now) {
  if (state_ != State::stopping || now < grace_deadline_ || running_ == 0) return {};
  return actions(
      action::Say{fmt::format("{} still running {} s after the stop signal; sending SIGKILL",
                              count_of(static_cast<long long>(running_), "worker"),
                              config_.shutdown_timeout),
                  Level::warning},
      action::SignalWorkers{SIGKILL, true, true});
}

// Whatever the state: a round that formed has ended the last attempt on every node. Its
// assignment starts the workers once the preflight checked the round's peers.
AgentActions AgentPolicy::on(const event::RoundFormed& e, Clock::time_point now) {
  if (state_ == State::done) return {};
  checking_ = !e.assignment.preflight.empty();
  AgentActions out = checking_ ? actions(action::CheckRound{e.assignment})
                               : on(event::Assignment{e.assignment}, now);
  out.emplace(out.begin(), action::StoreForRound{e.assignment.node_addresses});
  return out;
}

AgentActions AgentPolicy::on(const event::Assignment& e, Clock::time_point) {
  AgentActions out;
  checking_ = false;
  if (state_ != State::idle) return out;
  topology_ = assigned_topology(e.assignment, config_, one_node_master_addr_);
  max_restarts_ = e.assignment.max_restarts;
  start_attempt(out);
  return out;
}

// Not a leave: a lost node would be replaced by a restart, which would meet the same
// misconfiguration. The stop that follows says the line on every node, this one included.
AgentActions AgentPolicy::on(const event::PreflightFailed& e, Clock::time_point) {
  checking_ = false;
  if (state_ == State::done) return {};
  return actions(action::AbortRendezvous{e.line});
}

AgentActions AgentPolicy::on(const event::Restart& e, Clock::time_point now) {
  const rendezvous::Restart& r = e.restart;
  AgentActions out;
  drop_checks(out);
  if (state_ == State::done) return out;
  if (auto line = failures_.restart_line(r, max_restarts_))
    out.emplace_back(action::Say{std::move(*line), Level::warning});
  else if (!r.failure)
    out.emplace_back(
        action::Say{fmt::format("{}; restarting the workers in a new round", r.reason)});
  stop_orders_.on_restart();
  if (state_ == State::running) begin_stop(out, SIGTERM, now);
  if (state_ == State::idle) after_attempt(out);
  return out;
}

AgentActions AgentPolicy::on(const event::Stop& e, Clock::time_point now) {
  AgentActions out;
  drop_checks(out);
  if (state_ == State::done) return out;
  stop_orders_.on_stop(e.stop);
  if (state_ == State::running) begin_stop(out, SIGTERM, now);
  if (state_ == State::idle) after_attempt(out);
  return out;
}

AgentActions AgentPolicy::on(const event::Halt&, Clock::time_point now) {
  AgentActions out;
  drop_checks(out);
  if (state_ == State::done || stop_orders_.stopped()) return out;
  stop_orders_.on_halt();
  if (state_ == State::running) begin_stop(out, SIGTERM, now);
  if (state_ == State::idle) after_attempt(out);
  return out;
}

void AgentPolicy::start_attempt(AgentActions& out) {
  state_ = State::running;
  stop_orders_.new_attempt();
  failures_.clear();
  start_failed_ = 0;
  ran_ = true;
  running_ = static_cast<size_t>(config_.nproc_per_node.number);
  out.emplace_back(action::StartWorkers{topology_, max_restarts_});
}

void AgentPolicy::begin_stop(AgentActions& out, int sig, Clock::time_point now) {
  state_ = State::stopping;
  grace_deadline_ =
      now + std::chrono::milliseconds(static_cast<long long>(config_.shutdown_timeout * 1000));
  out.emplace_back(action::SignalWorkers{sig, true, true, sig == SIGTERM && !signal_received_});
  out.emplace_back(action::ArmGraceTimer{grace_deadline_});
}

// Every worker of this attempt has ended and nothing they started is left.
void AgentPolicy::after_attempt(AgentActions& out) {
  state_ = State::idle;
  if (stop_orders_.signal() != 0) return finish(out, shell_code_for_signal(stop_orders_.signal()));
  if (in_job_) {
    if (auto code = stop_orders_.after_attempt_in_job(out, failures_, ran_)) finish(out, *code);
    return;
  }
  if (failures_.empty()) return finish(out, 0);
  if (topology_.restart_count < config_.max_restarts) {
    ++topology_.restart_count;
    out.emplace_back(action::Say{
        failures_.restart_line(topology_.restart_count, config_.max_restarts), Level::warning});
    return start_attempt(out);
  }
  finish(out, failures_.fail(out));
}

void AgentPolicy::finish(AgentActions& out, int exit_code) {
  state_ = State::done;
  out.emplace_back(action::Finish{exit_code});
}

// The round's checks, if any still run, are for a round that is over.
void AgentPolicy::drop_checks(AgentActions& out) {
  if (!checking_) return;
  checking_ = false;
  out.emplace_back(action::DropChecks{});
}

bool AgentPolicy::forwarded(int sig) const {
  return std::find(config_.forward_signals.begin(), config_.forward_signals.end(), sig) !=
         config_.forward_signals.end();
}

}  // namespace trainrun::launch
