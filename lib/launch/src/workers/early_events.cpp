#include "early_events.hpp"

#include <utility>

namespace trainrun::launch {

bool EarlyEvents::hold(pid_t pid, const WaitEvent& event) {
  if (!expecting_) return false;
  held_[pid].push_back(event);
  return true;
}

std::vector<WaitEvent> EarlyEvents::replied(pid_t pid) {
  std::vector<WaitEvent> events;
  const auto it = held_.find(pid);
  if (it != held_.end()) events = std::move(it->second);
  clear();
  return events;
}

void EarlyEvents::clear() {
  expecting_ = false;
  held_.clear();
}

}  // namespace trainrun::launch
