#include "trainrun/rendezvous/round_state.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrun::rendezvous {
namespace {

const RoundMember* find(const std::vector<RoundMember>& v, const std::string& id) {
  auto it = std::find_if(v.begin(), v.end(), [&](const RoundMember& m) { return m.id == id; });
  return it == v.end() ? nullptr : &*it;
}

}  // namespace

std::string describe(const RoundMember& m) {
  return fmt::format("{} ({}, pid {})", m.node.host, m.node.addr, m.node.pid);
}

const RoundMember* RoundState::participant(const std::string& id) const {
  return find(participants, id);
}
const RoundMember* RoundState::waiter(const std::string& id) const { return find(waiting, id); }

void end_job(RoundState& s, Stop stop, RoundDecision& d) {
  // A failed preflight's reason is its node's line, which every agent, the hosting one included,
  // prints as the stop's: the server does not print it a second time.
  if (stop.cause == StopCause::preflight_failed)
    d.log.push_back(fmt::format("job ends ({})", to_string(stop.cause)));
  else
    d.log.push_back(fmt::format("job ends ({}): {}", to_string(stop.cause), stop.reason));
  d.changed = true;
  d.ended = true;
  s.phase = RoundState::Phase::ended;
  s.stop = std::move(stop);
  s.waiting.clear();
  s.participants.clear();
  s.started = false;
  s.expected.clear();
  s.done.clear();
  s.awaiting.clear();
  s.reports.clear();
  s.concluding_since.reset();
  s.concluding_why.clear();
}

}  // namespace trainrun::rendezvous
