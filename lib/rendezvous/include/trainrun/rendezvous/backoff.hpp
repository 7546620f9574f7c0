#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/base/text.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// Retrying until a deadline, as c10d's socket connects: exponential waits with jitter, and a
// tally of what failed, so that giving up says every distinct failure, not only the last. Pure:
// the time comes in, the wait goes out; the caller arms its own timer.
class Backoff {
 public:
  // A seed from the kernel's random source, through one std::random_device per thread: opening
  // one for each object took a sixth of the simulated agents' time in bench/rendezvous_scale.
  static std::uint32_t fresh_seed() {
    thread_local std::random_device device;
    return device();
  }

  // `seed`: the jitter's random source (tests give a fixed one).
  Backoff(BackoffOptions options, Clock::duration deadline, std::uint32_t seed = fresh_seed())
      : options_(options), deadline_(deadline), random_(seed) {}

  // The series of attempts begins: the deadline counts from `now`. failed() begins one too.
  void start(Clock::time_point now) {
    started_ = now;
    interval_ = options_.initial;
    failures_.clear();
    attempts_ = 0;
  }

  // An attempt succeeded: the next failure begins a new series.
  void reset() { started_.reset(); }

  bool running() const { return started_.has_value(); }
  Clock::duration elapsed(Clock::time_point now) const {
    return started_ ? now - *started_ : Clock::duration::zero();
  }
  Clock::duration deadline() const { return deadline_; }

  // An attempt failed at `now` for `why`: the wait before the next one, or nothing once the
  // deadline has passed (give up, saying summary()). The last wait ends on the deadline, so that
  // giving up is not late by a whole back-off.
  std::optional<Clock::duration> failed(const std::string& why, Clock::time_point now) {
    if (!started_) start(now);
    ++attempts_;
    tally(why);
    const Clock::duration left = deadline_ - (now - *started_);
    if (left <= Clock::duration::zero()) return std::nullopt;
    // Jitter spreads many agents' retries, so that a restarted server is not hit all at once.
    std::uniform_real_distribution<double> jitter(1.0 - options_.jitter, 1.0);
    auto wait = std::chrono::duration_cast<Clock::duration>(interval_ * jitter(random_));
    interval_ = std::min(
        std::chrono::duration_cast<Clock::duration>(interval_ * options_.multiplier), options_.max);
    return std::min(wait, left);
  }

  int attempts() const { return attempts_; }

  // "12 attempts failed: Connection refused x10, connection closed by peer x2": each distinct
  // failure once, in the order first seen, at most kShown of them and each cut to kLongest bytes.
  std::string summary() const {
    std::string out = fmt::format("{} attempt{} failed: ", attempts_, attempts_ == 1 ? "" : "s");
    for (std::size_t i = 0; i < failures_.size() && i < kShown; ++i) {
      out += fmt::format("{}{} x{}", i ? ", " : "", failures_[i].first, failures_[i].second);
    }
    if (failures_.size() > kShown)
      out += fmt::format(", {} other kinds", failures_.size() - kShown);
    return out;
  }

  static constexpr std::size_t kShown = 4;
  static constexpr std::size_t kLongest = 160;

 private:
  void tally(const std::string& why) {
    const std::string text(utf8_prefix(why, kLongest));
    for (auto& [seen, count] : failures_) {
      if (seen == text) {
        ++count;
        return;
      }
    }
    failures_.emplace_back(text, 1);
  }

  BackoffOptions options_;
  Clock::duration deadline_;
  std::minstd_rand random_;
  std::optional<Clock::time_point> started_;
  Clock::duration interval_{};
  int attempts_ = 0;
  std::vector<std::pair<std::string, int>> failures_;  // distinct failures, first seen first
};

}  // namespace trainrun::rendezvous
