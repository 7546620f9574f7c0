#pragma once

#include <deque>
#include <utility>

#include "agent_events.hpp"

namespace trainrun::launch {

// The agent's events, handled one at a time in the order raised: an event raised while another
// is handled (by carrying one of its actions out) waits until that one is done, so the handler is
// never re-entered and each event's actions are carried out whole, in order.
class AgentEventQueue {
 public:
  // Handles `event` with `handle` (called with a const AgentEvent&) now, then whatever was
  // raised meanwhile; from inside `handle`, queues it.
  template <class Handle>
  void raise(AgentEvent event, Handle&& handle) {
    pending_.push_back(std::move(event));
    if (handling_) return;
    handling_ = true;
    // An exception thrown out of `handle` ends the agent: what was queued is dropped with it.
    struct Done {
      AgentEventQueue& q;
      ~Done() {
        q.handling_ = false;
        q.pending_.clear();
      }
    } done{*this};
    while (!pending_.empty()) {
      const AgentEvent next = std::move(pending_.front());
      pending_.pop_front();
      handle(next);
    }
  }

 private:
  std::deque<AgentEvent> pending_;
  bool handling_ = false;
};

}  // namespace trainrun::launch
