#include "trainrun/rendezvous/refusal_throttle.hpp"

#include <catch2/catch.hpp>

using namespace trainrun::rendezvous;
using namespace std::chrono_literals;

TEST_CASE("refusals: one line per interval, the rest counted by kind and said at its end",
          "[refusals]") {
  RefusalThrottle t(10s);
  const Clock::time_point t0{};
  CHECK(t.admit("wrong token", t0));
  CHECK_FALSE(t.due());
  CHECK_FALSE(t.admit("wrong token", t0 + 1s));
  CHECK_FALSE(t.admit("wrong token", t0 + 3s));
  CHECK(t.holding());
  CHECK(t.due() == t0 + 10s);
  CHECK(t.release(t0 + 10s) == "... and 2 more refusals: 2 wrong token");
  CHECK_FALSE(t.holding());
  CHECK_FALSE(t.release(t0 + 11s));
  // Saying what was held back starts the next interval.
  CHECK_FALSE(t.admit("wrong token", t0 + 15s));
  CHECK(t.release(t0 + 20s) == "... and 1 more refusal: 1 wrong token");
  CHECK(t.admit("wrong token", t0 + 30s));
}

TEST_CASE("refusals: the first of each kind is said with its reason, inside the interval too",
          "[refusals]") {
  RefusalThrottle t(10s);
  const Clock::time_point t0{};
  CHECK(t.admit("handshake timeout", t0));
  CHECK_FALSE(t.admit("handshake timeout", t0 + 1s));
  // A wrong token right after another kind's line: shown, not only counted.
  CHECK(t.admit("wrong token", t0 + 2s));
  CHECK_FALSE(t.admit("wrong token", t0 + 3s));
  CHECK(t.admit("wrong run id", t0 + 4s));
  // The interval is the first line's: what is held back is said when it ends.
  CHECK(t.due() == t0 + 10s);
  CHECK(t.release(t0 + 10s) == "... and 2 more refusals: 1 handshake timeout, 1 wrong token");
  CHECK_FALSE(t.admit("wrong run id", t0 + 11s));
}
