#include "round_state.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrun::rendezvous {

Members::Members(std::initializer_list<RoundMember> members) : list_(members) { renumber(); }

std::size_t Members::position(const std::string& id) const {
  auto it = index_.find(id);
  if (it == index_.end()) return list_.size();
  return static_cast<std::size_t>(std::lower_bound(order_.begin(), order_.end(), it->second) -
                                  order_.begin());
}

const RoundMember* Members::find(const std::string& id) const {
  const std::size_t at = position(id);
  return at == list_.size() ? nullptr : &list_[at];
}

RoundMember* Members::find(const std::string& id) {
  const std::size_t at = position(id);
  return at == list_.size() ? nullptr : &list_[at];
}

void Members::push_back(RoundMember m) {
  const std::int64_t number = order_.empty() ? 0 : order_.back() + 1;
  list_.push_back(std::move(m));
  try {
    order_.push_back(number);
    if (!index_.emplace(list_.back().id, number).second) ++repeated_;
  } catch (...) {
    if (order_.size() == list_.size()) order_.pop_back();
    list_.pop_back();
    throw;
  }
}

void Members::insert(const_iterator pos, const_iterator first, const_iterator last) {
  // `first` and `last` may be another Members' (never this one's): copy them before inserting.
  std::vector<RoundMember> added(first, last);
  list_.insert(pos, added.begin(), added.end());
  renumber();
}

void Members::assign(const_iterator first, const_iterator last) {
  std::vector<RoundMember> list(first, last);
  list_ = std::move(list);
  renumber();
}

Members::const_iterator Members::erase(const_iterator pos) { return erase(pos, pos + 1); }

Members::const_iterator Members::erase(const_iterator first, const_iterator last) {
  const auto from = first - list_.cbegin();
  const auto to = last - list_.cbegin();
  if (repeated_ > 0) {
    list_.erase(first, last);
    renumber();
    return list_.cbegin() + from;
  }
  for (auto i = from; i < to; ++i) index_.erase(list_[static_cast<std::size_t>(i)].id);
  order_.erase(order_.begin() + from, order_.begin() + to);
  list_.erase(first, last);
  return list_.cbegin() + from;
}

bool Members::erase(const std::string& id) {
  const std::size_t at = position(id);
  if (at == list_.size()) return false;
  if (repeated_ == 0) {
    erase(list_.cbegin() + static_cast<std::ptrdiff_t>(at));
    return true;
  }
  list_.erase(
      std::remove_if(list_.begin(), list_.end(), [&](const RoundMember& m) { return m.id == id; }),
      list_.end());
  renumber();
  return true;
}

void Members::clear() {
  list_.clear();
  order_.clear();
  index_.clear();
  repeated_ = 0;
}

void Members::renumber() {
  order_.resize(list_.size());
  index_.clear();
  repeated_ = 0;
  for (std::size_t i = 0; i < list_.size(); ++i) {
    order_[i] = static_cast<std::int64_t>(i);
    if (!index_.emplace(list_[i].id, order_[i]).second) ++repeated_;
  }
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
