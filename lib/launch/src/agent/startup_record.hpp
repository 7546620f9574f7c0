#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "agent_actions.hpp"
#include "agent_events.hpp"
#include "attempt_startup.hpp"
#include "trainrun/launch/core/log.hpp"

namespace trainrun::launch {

// The running attempt's start-up record (AttemptStartup), kept from what passes through the
// agent's loop: each event as it is handled, each action the policy returned once it was carried
// out. It says the start-up once per attempt and hands every change to the job summary; it
// decides nothing and owns no process, socket or clock, so tests drive it with made-up times.
class StartupRecord {
 public:
  using Clock = std::chrono::steady_clock;
  // An instant on both clocks: the unix one for the times workers leave in files.
  struct Instant {
    Clock::time_point at;
    double unix_at = 0;
    static Instant now();
  };
  struct Hooks {
    // The record changed: the job summary's copy of the running attempt's.
    std::function<void(const AttemptStartup&)> changed;
    std::function<void(const std::string&, Level)> say;
    // What worker `local_rank` of attempt `restart_count` left of the C++ runtime's first
    // report() (lib/runtime's record_first_report): the file's text, none where it wrote none.
    std::function<std::optional<std::string>(int restart_count, int local_rank)> first_report;
  };

  explicit StartupRecord(Hooks hooks) : hooks_(std::move(hooks)) {}

  // Whether the agent serves the workers' store (TORCHELASTIC_USE_AGENT_STORE): known once the
  // job's settings are, before any attempt starts.
  void set_agent_store(bool agent_store) { agent_store_ = agent_store; }

  // An event, as the agent handles it at `now`, before the policy decides on it.
  void on(const AgentEvent& event, Instant now);
  // An action of the policy's for the event handled at `now`, once the agent carried it out.
  void on(const AgentAction& action, Instant now);

  // The running attempt's, from its StartWorkers until its AttemptEnded; none between attempts.
  const std::optional<AttemptStartup>& current() const { return startup_; }
  // Seconds from the running attempt's start to `at`.
  double since_began(Clock::time_point at) const;

 private:
  // What an attempt's seconds count from (AttemptStartup::Origin), on both clocks.
  struct Origin {
    AttemptStartup::Origin what = AttemptStartup::Origin::job_start;
    int rank = -1;  // worker_exit: whose
    Instant at;
  };

  template <class Event>
  void on_event(const Event&, Instant) {}
  void on_event(const event::StartSingleNode& e, Instant now);
  void on_event(const event::StartInJob& e, Instant now);
  void on_event(const event::WorkerExited& e, Instant now);
  void on_event(const event::AttemptEnded& e, Instant now);
  void on_event(const event::RoundFormed& e, Instant now);
  void on_event(const event::Assignment& e, Instant now);
  void on_event(const event::WorkersStarted& e, Instant now);
  void on_event(const event::ReachedStore& e, Instant now);
  void on_event(const event::StoreOwnersNamed& e, Instant now);
  void on_event(const event::FirstOutput& e, Instant now);

  void begin(const Topology& topology, Instant now);
  void changed();
  void say_startup(bool attempt_over);
  void read_first_reports();
  void say_first_output(bool attempt_over);

  Hooks hooks_;
  bool agent_store_ = false;
  Origin began_;                // the running attempt's
  std::optional<Origin> next_;  // the next attempt's, once the event it counts from has come
  std::optional<Clock::time_point> round_formed_;
  std::optional<AttemptStartup> startup_;
  int startup_said_ = -1;       // the restart count whose start-up was said
  int first_output_said_ = -1;  // the restart count whose first output was said
};

}  // namespace trainrun::launch
