#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// Connection-level refusals can come by the thousand (a flood): one line per interval, except
// that the first refusal of each kind is always said, with its reason (a wrong token among a
// flood, or right after another kind's line, is shown, not only counted). What the limit holds
// back is counted by kind and said when the interval ends. Kinds are the server's fixed names, so
// what is remembered is bounded. Pure: the time comes in; the caller logs and arms its timer.
class RefusalThrottle {
 public:
  explicit RefusalThrottle(Clock::duration interval) : interval_(interval) {}

  // A refusal of `kind` at `now`: true when its line is to be logged now (the first of its kind,
  // or the interval has passed), false when it is counted instead, to be said at due().
  bool admit(const std::string& kind, Clock::time_point now);
  bool holding() const { return !held_.empty(); }
  // When what is held back is to be said: the end of the interval of the last line logged.
  std::optional<Clock::time_point> due() const;
  // "... and 3 more refusals: 2 wrong token, 1 wrong run id", the most frequent kind first, or
  // nothing when nothing is held back. The next interval starts at `now`.
  std::optional<std::string> release(Clock::time_point now);

 private:
  Clock::duration interval_;
  std::optional<Clock::time_point> last_logged_;
  std::map<std::string, std::size_t> held_;  // by kind, since last_logged_
  std::set<std::string> said_;               // kinds whose reason was shown once
};

}  // namespace trainrun::rendezvous
