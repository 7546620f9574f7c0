#pragma once

#include <sys/types.h>

#include <map>
#include <vector>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// The events of children not known yet while a fork request is out to the --preload template.
// The worker is forked by the template's child, which exits at once: the worker is re-parented to
// us (a child subreaper) and may end, and be reaped as an orphan, before the template's reply
// names its pid. Its events are held here until that reply, then given to the supervisor in their
// order; those of any other orphan (what an earlier worker left) are dropped with the reply, as
// an orphan's always are. Pure.
class EarlyEvents {
 public:
  // A fork request was sent: unknown children's events are held until the reply.
  void expect() { expecting_ = true; }
  bool expecting() const { return expecting_; }
  // An event of a child nobody knows: held while a request is out (true); else not (false).
  bool hold(pid_t pid, const WaitEvent& event);
  // The reply came: the events held for `pid` (its worker; -1 where none was forked), in order,
  // and nothing more is held until the next request.
  std::vector<WaitEvent> replied(pid_t pid);
  // No reply will come (the template ended, the group is abandoned): everything held is dropped.
  void clear();

 private:
  bool expecting_ = false;
  std::map<pid_t, std::vector<WaitEvent>> held_;
};

}  // namespace trainrun::launch
