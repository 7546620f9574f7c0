#include "trainrun/rendezvous/refusal_throttle.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace trainrun::rendezvous {

bool RefusalThrottle::admit(const std::string& kind, Clock::time_point now) {
  // A kind not seen yet is said with its reason whatever the interval, which it leaves as it is.
  if (said_.insert(kind).second) {
    if (!last_logged_) last_logged_ = now;
    return true;
  }
  if (last_logged_ && now - *last_logged_ < interval_) {
    ++held_[kind];
    return false;
  }
  last_logged_ = now;
  return true;
}

std::optional<Clock::time_point> RefusalThrottle::due() const {
  if (held_.empty() || !last_logged_) return std::nullopt;
  return *last_logged_ + interval_;
}

std::optional<std::string> RefusalThrottle::release(Clock::time_point now) {
  if (held_.empty()) return std::nullopt;
  std::vector<std::pair<std::size_t, std::string>> counts;
  std::size_t total = 0;
  for (const auto& [kind, n] : held_) {
    counts.emplace_back(n, kind);
    total += n;
  }
  std::stable_sort(counts.begin(), counts.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string parts;
  for (const auto& [n, kind] : counts) {
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, kind);
  }
  held_.clear();
  last_logged_ = now;
  return fmt::format("... and {} more {}: {}", total, total == 1 ? "refusal" : "refusals", parts);
}

}  // namespace trainrun::rendezvous
