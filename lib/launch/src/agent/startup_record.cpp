#include "startup_record.hpp"

#include <algorithm>
#include <variant>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"

namespace trainrun::launch {

StartupRecord::Instant StartupRecord::Instant::now() { return Instant{Clock::now(), unix_time()}; }

void StartupRecord::on(const AgentEvent& event, Instant now) {
  std::visit([&](const auto& e) { on_event(e, now); }, event);
}

void StartupRecord::on(const AgentAction& action, Instant now) {
  if (const auto* start = std::get_if<action::StartWorkers>(&action))
    return begin(start->topology, now);
  // Where no worker of this node failed first, the next attempt counts from this stop.
  if (std::holds_alternative<action::ArmGraceTimer>(action) && !next_)
    next_ = Origin{AttemptStartup::Origin::stop, -1, now};
}

double StartupRecord::since_began(Clock::time_point at) const {
  return std::chrono::duration<double>(at - began_.at.at).count();
}

// The first attempt counts from the job's start.
void StartupRecord::on_event(const event::StartSingleNode&, Instant now) {
  began_ = Origin{AttemptStartup::Origin::job_start, -1, now};
}
void StartupRecord::on_event(const event::StartInJob&, Instant now) {
  began_ = Origin{AttemptStartup::Origin::job_start, -1, now};
}

// A failure before any stop is what stops the attempt: a restart counts from its exit, at the
// instant it was reaped (the summary's `ended_at`), not from when this event is handled.
void StartupRecord::on_event(const event::WorkerExited& e, Instant now) {
  const WorkerExit& x = e.exit;
  if (next_ || !startup_ || !x.status.failed()) return;
  const auto since_reaped = std::chrono::duration<double>(now.unix_at - x.seen_at);
  next_ = Origin{
      AttemptStartup::Origin::worker_exit, startup_->topology.base_rank + x.local_rank,
      Instant{now.at - std::chrono::duration_cast<Clock::duration>(since_reaped), x.seen_at}};
}

// What was not seen of the attempt's start-up is said now; the next attempt begins.
void StartupRecord::on_event(const event::AttemptEnded&, Instant now) {
  if (startup_) read_first_reports(), say_startup(true), say_first_output(true);
  startup_.reset();
  round_formed_.reset();
  began_ = next_.value_or(Origin{AttemptStartup::Origin::attempt_end, -1, now});
  next_.reset();
}

// The round counts as formed once its checks passed (Assignment); where there are none to run,
// when it formed.
void StartupRecord::on_event(const event::RoundFormed&, Instant now) { round_formed_ = now.at; }
void StartupRecord::on_event(const event::Assignment&, Instant now) { round_formed_ = now.at; }

void StartupRecord::on_event(const event::WorkersStarted& e, Instant) {
  if (!startup_ || startup_->topology.restart_count != e.restart_count) return;
  startup_->workers_s = since_began(e.at);
  for (const auto& [local_rank, at] : e.started)
    startup_->started.emplace(startup_->topology.base_rank + local_rank, since_began(at));
  changed();
  if (startup_->complete()) say_startup(false);
}

void StartupRecord::on_event(const event::ReachedStore& e, Instant now) {
  if (!startup_) return;
  if (e.restart_count >= 0 && e.restart_count != startup_->topology.restart_count) return;
  if (!e.rank) {
    ++startup_->unattributed;
  } else if (!startup_->at_store.count(*e.rank)) {
    startup_->at_store[*e.rank] = since_began(e.at == Clock::time_point{} ? now.at : e.at);
  }
  changed();
  if (startup_->complete()) say_startup(false);
}

void StartupRecord::on_event(const event::StoreOwnersNamed& e, Instant) {
  if (!startup_ || startup_->topology.restart_count != e.restart_count) return;
  for (const auto& r : e.ranks) {
    --startup_->unattributed;
    if (startup_->at_store.count(r.rank) && startup_->at_store[r.rank] <= r.at_s) continue;
    startup_->at_store[r.rank] = r.at_s;
    startup_->node_of[r.rank] = r.node;
  }
  if (!e.why.empty() && e.unnamed > 0 && startup_->unnamed_why.empty())
    startup_->unnamed_why = e.why;
  changed();
  if (startup_->complete()) say_startup(false);
}

void StartupRecord::on_event(const event::FirstOutput& e, Instant now) {
  if (!startup_ || startup_->topology.restart_count != e.restart_count) return;
  const int rank = startup_->topology.base_rank + e.local_rank;
  if (!startup_->first_output.emplace(rank, since_began(now.at)).second) return;
  changed();
  say_first_output(false);
}

// A node alone forms no round: its topology is made when its workers are about to start.
void StartupRecord::begin(const Topology& topology, Instant now) {
  startup_.emplace();
  startup_->topology = topology;
  startup_->origin = began_.what;
  startup_->origin_rank = began_.rank;
  startup_->origin_at = began_.at.unix_at;
  startup_->round_s = since_began(round_formed_.value_or(now.at));
  startup_->store = !agent_store_              ? AttemptStartup::Store::worker
                    : topology.group_rank == 0 ? AttemptStartup::Store::here
                                               : AttemptStartup::Store::other_node;
  changed();
}

void StartupRecord::changed() {
  if (hooks_.changed) hooks_.changed(*startup_);
}

// Once per attempt, when its start-up is complete or the attempt is over: the first attempt's
// with -v, a restart's always.
void StartupRecord::say_startup(bool attempt_over) {
  if (startup_said_ == startup_->topology.restart_count) return;
  if (!attempt_over && !startup_->complete()) return;
  startup_said_ = startup_->topology.restart_count;
  hooks_.say(startup_line(*startup_),
             startup_->topology.restart_count == 0 ? Level::debug : Level::info);
}

// Read when the start-up is said.
void StartupRecord::read_first_reports() {
  const Topology& t = startup_->topology;
  bool found = false;
  for (int local_rank = 0; local_rank < t.local_world_size; ++local_rank) {
    if (startup_->first_report.count(t.base_rank + local_rank)) continue;
    const auto text =
        hooks_.first_report ? hooks_.first_report(t.restart_count, local_rank) : std::nullopt;
    // One line: the seconds since the epoch.
    const auto at = text ? parse_number(text->substr(0, text->find('\n'))) : std::nullopt;
    if (!at) continue;
    startup_->first_report[t.base_rank + local_rank] = std::max(0.0, *at - began_.at.unix_at);
    found = true;
  }
  if (found) changed();
}

// Once per attempt, with -v, when every worker has written or the attempt is over.
void StartupRecord::say_first_output(bool attempt_over) {
  if (first_output_said_ == startup_->topology.restart_count) return;
  if (!attempt_over && !startup_->all_spoke()) return;
  first_output_said_ = startup_->topology.restart_count;
  read_first_reports();
  hooks_.say(first_output_line(*startup_), Level::debug);
}

}  // namespace trainrun::launch
