#include "trainrun/rendezvous/backoff.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace trainrun::rendezvous;
using namespace std::chrono_literals;

namespace {

BackoffOptions doubling(double jitter) {
  BackoffOptions o;
  o.initial = 100ms;
  o.max = 1s;
  o.multiplier = 2;
  o.jitter = jitter;
  return o;
}

}  // namespace

TEST_CASE("backoff: the waits grow by the multiplier up to the maximum", "[backoff]") {
  Backoff b(doubling(0), 60s);
  const Clock::time_point t0{};
  std::vector<Clock::duration> waits;
  for (int i = 0; i < 6; ++i) waits.push_back(*b.failed("refused", t0 + i * 1ms));
  CHECK(waits == std::vector<Clock::duration>{100ms, 200ms, 400ms, 800ms, 1s, 1s});
}

TEST_CASE("backoff: jitter draws each wait below its interval, the same for the same seed",
          "[backoff]") {
  Backoff a(doubling(0.5), 60s, 7);
  Backoff b(doubling(0.5), 60s, 7);
  const Clock::time_point t0{};
  for (Clock::duration interval : {100ms, 200ms, 400ms}) {
    const Clock::duration wait = *a.failed("refused", t0);
    CHECK(wait == *b.failed("refused", t0));
    CHECK(wait >= interval / 2);
    CHECK(wait <= interval);
  }
}

TEST_CASE("backoff: the last wait ends on the deadline; past it, give up", "[backoff]") {
  Backoff b(doubling(0), 1s);
  const Clock::time_point t0{};
  b.start(t0);
  CHECK(*b.failed("refused", t0 + 950ms) == 50ms);
  CHECK_FALSE(b.failed("refused", t0 + 1s));
  CHECK(b.elapsed(t0 + 1s) == 1s);
}

TEST_CASE("backoff: a success ends the series; the next failure begins a new one", "[backoff]") {
  Backoff b(doubling(0), 1s);
  const Clock::time_point t0{};
  b.failed("refused", t0);
  b.failed("refused", t0 + 500ms);
  b.reset();
  CHECK_FALSE(b.running());
  // Counted from the new first failure, with the first interval again.
  CHECK(*b.failed("HTTP 503", t0 + 5s) == 100ms);
  CHECK(b.summary() == "1 attempt failed: HTTP 503 x1");
}

TEST_CASE("backoff: the summary lists every distinct failure, bounded", "[backoff]") {
  Backoff b(doubling(0), 60s);
  const Clock::time_point t0{};
  for (int i = 0; i < 3; ++i) b.failed("Connection refused", t0);
  b.failed("connection closed by peer during the handshake", t0);
  b.failed("Connection refused", t0);
  CHECK(b.summary() ==
        "5 attempts failed: Connection refused x4, connection closed by peer during the "
        "handshake x1");

  Backoff many(doubling(0), 60s);
  for (int i = 0; i < 6; ++i) many.failed("failure " + std::to_string(i), t0);
  many.failed(std::string(1000, 'x'), t0);
  const std::string summary = many.summary();
  CHECK(summary.find("failure 3 x1, 3 other kinds") != std::string::npos);
  CHECK(summary.find("failure 4") == std::string::npos);
  CHECK(summary.size() < 4 * (Backoff::kLongest + 8) + 64);
}
