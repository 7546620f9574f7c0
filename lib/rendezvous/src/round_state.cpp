#include "trainrun/rendezvous/round_state.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrun::rendezvous {

Members::Members(std::initializer_list<RoundMember> members) : list_(members) { reindex(); }

const RoundMember* Members::find(const std::string& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &list_[it->second];
}

RoundMember* Members::find(const std::string& id) {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &list_[it->second];
}

void Members::push_back(RoundMember m) {
  index_.emplace(m.id, list_.size());
  list_.push_back(std::move(m));
}

void Members::insert(const_iterator pos, const_iterator first, const_iterator last) {
  // `first` and `last` may be another Members' (never this one's): copy them before inserting.
  std::vector<RoundMember> added(first, last);
  list_.insert(pos, added.begin(), added.end());
  reindex();
}

void Members::assign(const_iterator first, const_iterator last) {
  std::vector<RoundMember> list(first, last);
  list_ = std::move(list);
  reindex();
}

Members::const_iterator Members::erase(const_iterator pos) { return erase(pos, pos + 1); }

Members::const_iterator Members::erase(const_iterator first, const_iterator last) {
  const auto at = first - list_.cbegin();
  list_.erase(first, last);
  reindex();
  return list_.cbegin() + at;
}

bool Members::erase(const std::string& id) {
  if (!index_.count(id)) return false;
  list_.erase(
      std::remove_if(list_.begin(), list_.end(), [&](const RoundMember& m) { return m.id == id; }),
      list_.end());
  reindex();
  return true;
}

void Members::clear() {
  list_.clear();
  index_.clear();
}

void Members::reindex() {
  index_.clear();
  for (std::size_t i = 0; i < list_.size(); ++i) index_.emplace(list_[i].id, i);
}

std::string describe(const RoundMember& m) {
  return fmt::format("{} ({}, pid {})", m.node.host, m.node.addr, m.node.pid);
}

const RoundMember* RoundState::participant(const std::string& id) const {
  return participants.find(id);
}
const RoundMember* RoundState::waiter(const std::string& id) const { return waiting.find(id); }

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
