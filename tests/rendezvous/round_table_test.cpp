// The round rules, one row per case, each run against both backends (round_backends.hpp): the
// built-in rendezvous in process and etcd against a real etcd. What is one backend's own (the
// built-in's heartbeats, host and static ranks; etcd's answers, generations and state encoding)
// is tested beside it, in round_machine_test.cpp and etcd_round_test.cpp.
#include <catch2/catch.hpp>

#include "round_backends.hpp"
#include "worker_failure.hpp"

using namespace trainrun::rendezvous;
using namespace trainrun::rendezvous::table;
using std::chrono::seconds;

namespace {

RoundOptions job(int min, int max, int restarts = 0) {
  RoundOptions o;
  o.min_nodes = min;
  o.max_nodes = max;
  o.max_restarts = restarts;
  return o;
}

RoundOptions timed(RoundOptions o, Clock::duration join_timeout, Clock::duration last_call) {
  o.join_timeout = join_timeout;
  o.last_call_timeout = last_call;
  return o;
}

template <class Row>
void on_both_backends(const RoundOptions& options, Row row) {
  SECTION("built-in") { row(*builtin_backend(options)); }
  SECTION("etcd") {
    if (auto b = etcd_backend(options)) row(*b);
  }
}

// Nothing until `d` has passed, then `told()` (what a node was told) is there.
template <class Told>
void only_after(Backend& b, Clock::duration d, Told told) {
  b.advance(d - seconds(1));
  CHECK_FALSE(told());
  b.advance(seconds(1));
  REQUIRE(told());
}

// Node `n` has its place in a round of `nodes` nodes.
void assigned_in(const Backend& b, int n, int nodes) {
  REQUIRE(b.assignment(n));
  CHECK(b.assignment(n)->group_world_size == nodes);
}

}  // namespace

TEST_CASE("a round forms at once when MAX nodes have joined, ranks by host", "[round]") {
  on_both_backends(job(2, 2), [](Backend& b) {
    b.join(1, "nodeb", 3);
    CHECK_FALSE(b.assignment(1));
    b.join(2, "nodea", 2);
    const auto a = b.assignment(2);
    const auto c = b.assignment(1);
    REQUIRE(a);
    REQUIRE(c);
    CHECK(a->group_rank == 0);
    CHECK(a->base_rank == 0);
    CHECK(c->group_rank == 1);
    CHECK(c->base_rank == 2);
    CHECK(c->world_size == 5);
    CHECK(c->group_world_size == 2);
    CHECK(c->local_world_size == 3);
    CHECK(c->master_addr == "10.0.0.2");
    CHECK(c->master_port == 30002);
    CHECK(c->restart_count == 0);
  });
}

// Each node's group rank, nodes 1..n.
std::vector<int> ranks_of(const Backend& b, int n) {
  std::vector<int> out;
  for (int node = 1; node <= n; ++node) {
    const auto a = b.assignment(node);
    out.push_back(a ? a->group_rank : -1);
  }
  return out;
}

TEST_CASE("the node at the endpoint is node rank 0, whenever it joins", "[round]") {
  on_both_backends(job(3, 3), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.join(3, "c", 1, std::nullopt, Wish{-1, true});
    CHECK(ranks_of(b, 3) == std::vector<int>{1, 2, 0});
    CHECK(b.assignment(1)->master_addr == "10.0.0.3");
    CHECK(b.assignment(1)->master_port == 30003);
  });
}

TEST_CASE("a --node-rank is given when free; of two asking for one, the first by host name",
          "[round]") {
  on_both_backends(job(4, 4), [](Backend& b) {
    b.join(1, "d", 1, std::nullopt, Wish{0, false});  // 0 is the endpoint's node's
    b.join(2, "c", 1, std::nullopt, Wish{1, false});
    b.join(3, "b", 1, std::nullopt, Wish{1, false});
    b.join(4, "a", 1, std::nullopt, Wish{-1, true});
    CHECK(ranks_of(b, 4) == std::vector<int>{3, 2, 1, 0});
  });
}

TEST_CASE("ranks stay put: a newcomer takes a free rank, the members keep theirs", "[round]") {
  on_both_backends(timed(job(2, 4, 1), RoundOptions{}.join_timeout, seconds(5)), [](Backend& b) {
    b.join(1, "a");
    b.join(3, "c");
    b.advance(seconds(5));
    CHECK(ranks_of(b, 3) == std::vector<int>{0, -1, 1});
    b.join(2, "b");  // sorts between them
    REQUIRE(b.restart(1));
    b.join(1, "a");
    b.join(3, "c");
    REQUIRE(b.assignment(2));
    CHECK(ranks_of(b, 3) == std::vector<int>{0, 2, 1});
    // A worker failure, the same nodes back: the same ranks.
    b.fail(2, FailureReport{"b", 2, 0, 1, ""});
    for (int n : {3, 1, 2}) b.join(n, std::string(1, static_cast<char>('a' + n - 1)));
    REQUIRE(b.assignment(1)->round == 2);
    CHECK(ranks_of(b, 3) == std::vector<int>{0, 2, 1});
  });
}

TEST_CASE("with MIN < MAX a round forms after the last call", "[round]") {
  on_both_backends(timed(job(2, 4), RoundOptions{}.join_timeout, seconds(30)), [](Backend& b) {
    b.join(1, "a");
    b.advance(seconds(100));  // below MIN: no last call yet
    CHECK_FALSE(b.assignment(1));
    b.join(2, "b");
    only_after(b, seconds(30), [&] { return b.assignment(1); });
    CHECK(b.assignment(1)->group_world_size == 2);
  });
}

TEST_CASE("a late join makes every member restart into a bigger round", "[round]") {
  on_both_backends(timed(job(2, 3), RoundOptions{}.join_timeout, seconds(5)), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.advance(seconds(5));
    REQUIRE(b.assignment(1));
    b.join(3, "c");
    for (int n : {1, 2}) {
      REQUIRE(b.restart(n));
      CHECK(b.restart(n)->cause == RestartCause::scale_up);
      CHECK_THAT(b.restart(n)->reason, Catch::Contains("scaling up from 2 nodes"));
    }
    CHECK_FALSE(b.restart(3));
    // The survivors join again; the round forms as soon as all are back, with no last call.
    b.join(1, "a");
    b.join(2, "b");
    REQUIRE(b.assignment(3));
    CHECK(b.assignment(3)->round == 1);
    CHECK(b.assignment(3)->group_world_size == 3);
    CHECK(b.assignment(3)->group_rank == 2);
    CHECK(b.assignment(1)->restart_count == 0);  // growing is not a failure restart
  });
}

TEST_CASE("a newcomer waits while the job runs full, then gives up, in count_of wording",
          "[round]") {
  on_both_backends(timed(job(1, 1), seconds(60), RoundOptions{}.last_call_timeout), [](Backend& b) {
    b.join(1, "a");
    REQUIRE(b.assignment(1));
    b.join(2, "b");
    CHECK_FALSE(b.restart(1));
    CHECK_FALSE(b.assignment(2));
    only_after(b, seconds(60), [&] { return b.stop(2); });
    CHECK(b.stop(2)->cause == StopCause::join_timeout);
    CHECK(b.stop(2)->reason == "timed out after 60 s: the job at " + b.endpoint() +
                                   " is running with its maximum of 1 node");
    CHECK_FALSE(b.stop(1));
  });
}

TEST_CASE("a waiting node that joins again keeps its place in the line", "[round]") {
  on_both_backends(job(1, 1, 1), [](Backend& b) {
    b.join(1, "a");
    REQUIRE(b.assignment(1));
    b.join(3, "c");
    b.join(4, "d");
    b.join(3, "c", 2);  // again, with another descriptor: it is refreshed, not queued again
    CHECK_FALSE(b.refused(3));
    b.fail(1, FailureReport{"a", 0, 0, 1, ""});
    REQUIRE(b.restart(1));
    // The one place of the next round goes to the first in line.
    REQUIRE(b.assignment(3));
    CHECK(b.assignment(3)->local_world_size == 2);
    CHECK_FALSE(b.assignment(4));
  });
}

TEST_CASE("a join without a master port is refused", "[round]") {
  on_both_backends(job(2, 2), [](Backend& b) {
    b.join(1, "a");
    b.join(3, "x", 1, 0);
    REQUIRE(b.refused(3));
    CHECK_THAT(*b.refused(3), Catch::Contains("join carries no reserved master_port"));
    CHECK_FALSE(b.assignment(1));
    b.join(2, "b");
    assigned_in(b, 1, 2);
    CHECK_FALSE(b.assignment(3));
  });
}

TEST_CASE("a waiting node that is lost is forgotten before the round forms", "[round]") {
  on_both_backends(job(2, 2), [](Backend& b) {
    b.join(1, "a");
    b.lose(1, "connection closed");
    b.join(2, "b");
    CHECK_FALSE(b.assignment(2));
    b.join(3, "c");
    assigned_in(b, 2, 2);
  });
}

TEST_CASE("a worker failure restarts every node while restarts remain, then the job concludes",
          "[round]") {
  on_both_backends(job(2, 2, 1), [](Backend& b) {
    b.join(1, "a", 2);
    b.join(2, "b", 2);
    REQUIRE(b.assignment(1));
    b.fail(2, FailureReport{"b", 3, 1, 7, "exit 7"});
    for (int n : {1, 2}) {
      REQUIRE(b.restart(n));
      CHECK(b.restart(n)->cause == RestartCause::worker_failed);
      CHECK(b.restart(n)->restart_count == 1);
      CHECK(b.restart(n)->reason ==
            "worker failed on b: rank 3 (local rank 1) exited with code 7; restarting (1 of 1 "
            "restart)");
      CHECK(b.restart(n)->failure->host == "b");
    }
    // A second report from the ended round (its neighbours dying) does not count again.
    b.fail(1, FailureReport{"a", 0, 0, 1, ""}, {}, 0, 0);
    b.join(1, "a", 2);
    b.join(2, "b", 2);
    REQUIRE(b.assignment(1));
    CHECK(b.assignment(1)->round == 1);
    CHECK(b.assignment(1)->restart_count == 1);

    // No restart left: every node stops its workers and says what failed before the stop.
    b.fail(1, FailureReport{"a", 1, 1, 139, "Signal 11"});
    CHECK(b.halted(1));
    CHECK(b.halted(2));
    b.ended(1, {}, 0);
    CHECK_FALSE(b.stop(1));
    b.ended(2, {}, 0);
    for (int n : {1, 2}) {
      REQUIRE(b.stop(n));
      CHECK(b.stop(n)->cause == StopCause::worker_failed);
      CHECK(b.stop(n)->exit_code == 139);
      CHECK_THAT(b.stop(n)->reason, Catch::Contains("no restarts left (1 used)"));
      CHECK(b.stop(n)->failure->rank == 1);
    }
  });
}

TEST_CASE("a failed preflight ends the job on every node, whatever restarts are left", "[round]") {
  on_both_backends(job(2, 2, 3), [](Backend& b) {
    b.join(1, "a", 1);
    b.join(2, "b", 1);
    REQUIRE(b.assignment(1));
    REQUIRE(b.assignment(2));
    b.abort(2, "preflight: b cannot reach a");
    for (int n : {1, 2}) {
      REQUIRE(b.stop(n));
      CHECK(b.stop(n)->cause == StopCause::preflight_failed);
      CHECK(b.stop(n)->reason == "preflight: b cannot reach a");
      CHECK(b.stop(n)->exit_code == 1);
      CHECK_FALSE(b.restart(n));
    }
  });
}

TEST_CASE("the job's root cause is its earliest failure on any node, whichever came first",
          "[round]") {
  on_both_backends(job(3, 3), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.join(3, "c");
    b.done(3);  // at the exit barrier: nothing to add, not waited for
    const WorkerFailure first = worker_failure("a", 0, 3, 200);
    b.fail(1, FailureReport{"a", 0, 0, 3, ""}, {first}, 0);
    CHECK(b.halted(2));
    CHECK_FALSE(b.halted(3));
    // Node b's worker failed later, stopped by the halt, but its error file is dated earlier.
    b.ended(2, {worker_failure("b", 1, 4, 100)}, 2);
    CHECK_FALSE(b.stop(2));
    b.ended(1, {first}, 0);
    for (int n : {1, 2, 3}) {
      REQUIRE(b.stop(n));
      CHECK(b.stop(n)->exit_code == 4);
      CHECK(b.stop(n)->failure->rank == 1);
      REQUIRE(b.stop(n)->failures.size() == 2);
      CHECK(b.stop(n)->failures[0].rank == 1);
      CHECK(b.stop(n)->failures[1].rank == 0);
      CHECK(b.stop(n)->not_relayed == 2);
      CHECK_THAT(b.stop(n)->reason, Catch::Contains("rank 1") && Catch::Contains("of 4 failures"));
    }
  });
}

TEST_CASE("a node lost before it says what failed is not waited for, its failure counts",
          "[round]") {
  on_both_backends(job(2, 2), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.fail(2, FailureReport{"b", 1, 0, 5, ""}, {worker_failure("b", 1, 5, 50)}, 0);
    b.ended(1, {}, 0);
    CHECK_FALSE(b.stop(1));
    b.lose(2, "connection reset");
    REQUIRE(b.stop(1));
    CHECK(b.stop(1)->cause == StopCause::worker_failed);
    CHECK(b.stop(1)->exit_code == 5);
    REQUIRE(b.stop(1)->failures.size() == 1);
    CHECK(b.stop(1)->failures[0].host == "b");
  });
}

TEST_CASE("no word from a halted node within the join timeout: the job ends without it",
          "[round]") {
  on_both_backends(timed(job(2, 2), seconds(60), RoundOptions{}.last_call_timeout), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.fail(1, FailureReport{"a", 0, 0, 3, ""}, {worker_failure("a", 0, 3, 200)}, 0);
    only_after(b, seconds(60), [&] { return b.stop(1); });
    CHECK(b.stop(1)->exit_code == 3);
  });
}

TEST_CASE("all nodes done ends the job with success for everyone", "[round]") {
  on_both_backends(job(2, 2), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.done(1);
    b.done(1);  // repeated: still one node
    CHECK_FALSE(b.stop(1));
    b.done(2);
    for (int n : {1, 2}) {
      REQUIRE(b.stop(n));
      CHECK(b.stop(n)->cause == StopCause::finished);
      CHECK(b.stop(n)->exit_code == 0);
      CHECK(b.stop(n)->reason == "all 2 nodes finished");
    }
  });
}

TEST_CASE("a one-node job's end says the node finished", "[round]") {
  on_both_backends(job(1, 1), [](Backend& b) {
    b.join(1, "a");
    b.done(1);
    REQUIRE(b.stop(1));
    CHECK(b.stop(1)->reason == "the node finished");
  });
}

TEST_CASE("a lost node: a smaller round while restarts are left and MIN nodes remain", "[round]") {
  on_both_backends(job(2, 3, 2), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.join(3, "c");
    REQUIRE(b.assignment(1));
    b.lose(3, "connection closed by peer");
    REQUIRE(b.restart(1));
    CHECK(b.restart(1)->cause == RestartCause::node_lost);
    CHECK_THAT(b.restart(1)->reason,
               Catch::StartsWith("node c (10.0.0.3, pid 1003) lost (") &&
                   Catch::EndsWith("); continuing with 2 nodes (1 of 2 restarts)"));
    b.join(1, "a");
    b.join(2, "b");
    assigned_in(b, 1, 2);
    CHECK(b.assignment(2)->restart_count == 1);
  });
}

TEST_CASE("a member lost before it joins the next round again is not waited for", "[round]") {
  on_both_backends(timed(job(1, 3, 2), RoundOptions{}.join_timeout, seconds(30)), [](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.join(3, "c");
    b.fail(3, FailureReport{"c", 2, 0, 1, ""});
    b.join(1, "a");
    b.join(2, "b");
    CHECK(b.assignment(1)->round == 0);  // c is still awaited
    b.lose(3, "connection closed by peer");
    REQUIRE(b.assignment(1));
    CHECK(b.assignment(1)->round == 1);
    CHECK(b.assignment(1)->group_world_size == 2);
  });
}

TEST_CASE("a lost node ends the job below MIN, or with no restart left", "[round]") {
  struct Case {
    RoundOptions options;
    std::string why;
    std::string ending;
  };
  const Case c = GENERATE(
      Case{job(2, 2, 5), "connection reset", "; 1 node remains, fewer than the minimum of 2"},
      Case{job(1, 2, 0), "left: stopped by SIGTERM",
           "(left: stopped by SIGTERM); no restarts left (0 of 0 restarts used)"});
  on_both_backends(c.options, [&](Backend& b) {
    b.join(1, "a");
    b.join(2, "b");
    b.lose(2, c.why);
    REQUIRE(b.stop(1));
    CHECK(b.stop(1)->cause == StopCause::node_lost);
    CHECK(b.stop(1)->exit_code == 1);
    CHECK_THAT(b.stop(1)->reason, Catch::StartsWith("node b (10.0.0.2, pid 1002) lost (") &&
                                      Catch::EndsWith(c.ending));
  });
}

TEST_CASE("a round not formed within the join timeout ends the job, naming what is missing",
          "[round]") {
  on_both_backends(timed(job(3, 3), seconds(600), RoundOptions{}.last_call_timeout),
                   [](Backend& b) {
                     b.join(1, "a");
                     only_after(b, seconds(600), [&] { return b.stop(1); });
                     CHECK(b.stop(1)->cause == StopCause::join_timeout);
                     CHECK(b.stop(1)->reason == "timed out after 600 s waiting for nodes at " +
                                                    b.endpoint() + ": 1 of 3 joined, 2 missing");
                   });
}
