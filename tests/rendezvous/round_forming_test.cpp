// How rounds form (RoundForming), on a plain state: the rules as a whole run against both
// backends in round_table_test.cpp.
#include "round_forming.hpp"

#include <catch2/catch.hpp>

#include "test_node.hpp"

using namespace trainrun::rendezvous;
using namespace std::chrono_literals;
using Phase = RoundState::Phase;

namespace {

RoundOptions elastic(int min, int max) {
  RoundOptions o;
  o.min_nodes = min;
  o.max_nodes = max;
  o.last_call_timeout = 5s;
  o.join_timeout = 60s;
  return o;
}

}  // namespace

TEST_CASE("round forming: MIN joined waits out the last call; MAX forms at once", "[forming]") {
  const RoundForming forming(elastic(2, 3), "h:1");
  RoundState s;
  CHECK(forming.join(s, "a", node("a"), 0s).formed.empty());
  CHECK(forming.join(s, "b", node("b"), 1s).formed.empty());
  CHECK(forming.next_deadline(s) == 6s);  // the last call, from MIN reached
  RoundDecision d;
  forming.tick_forming(s, 5s, d);
  CHECK(s.phase == Phase::forming);
  forming.tick_forming(s, 6s, d);
  CHECK(s.phase == Phase::running);
  CHECK(d.formed.size() == 2);

  RoundState full;
  forming.join(full, "a", node("a"), 0s);
  forming.join(full, "b", node("b"), 0s);
  CHECK(forming.join(full, "c", node("c"), 0s).formed.size() == 3);
}

TEST_CASE("round forming: after a restart the round forms once every survivor is back",
          "[forming]") {
  const RoundForming forming(elastic(1, 3), "h:1");
  RoundState s;
  forming.join(s, "a", node("a"), 0s);
  forming.join(s, "b", node("b"), 0s);
  RoundDecision formed;
  forming.tick_forming(s, 5s, formed);
  REQUIRE(s.phase == Phase::running);
  forming.start(s);
  RoundDecision d;
  forming.restart(s, 10s, Restart{RestartCause::worker_failed, "a worker failed", 1, std::nullopt},
                  d);
  CHECK(s.round == 1);
  CHECK(d.restarted == std::vector<std::string>{"a", "b"});
  CHECK(forming.join(s, "a", node("a"), 11s).formed.empty());  // MIN, but b is still expected
  CHECK(forming.join(s, "b", node("b"), 12s).formed.size() == 2);
}

TEST_CASE("round forming: a round not formed within the join timeout ends the job", "[forming]") {
  const RoundForming forming(elastic(2, 2), "h:1");
  RoundState s;
  forming.join(s, "a", node("a"), 0s);
  RoundDecision d;
  forming.tick_forming(s, 60s, d);
  CHECK(d.ended);
  REQUIRE(s.stop);
  CHECK(s.stop->cause == StopCause::join_timeout);
  CHECK_THAT(s.stop->reason, Catch::Contains("waiting for nodes at h:1: 1 of 2 joined, 1 missing"));
}
