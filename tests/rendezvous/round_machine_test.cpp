// What the built-in rendezvous adds to the round rules: connections, heartbeats, status messages,
// its host leaving, static ranks. The rules themselves are round_table_test.cpp's, on both
// backends.
#include "round_machine.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <vector>

using namespace trainrun::rendezvous;
using std::chrono::seconds;

namespace {

// What a RoundMachine is built from.
struct Setup {
  RoundOptions round;
  LivenessOptions liveness;
  std::string endpoint;
};

// Drives a RoundMachine with a fake clock and keeps what each node was sent.
struct Harness {
  explicit Harness(const Setup& setup)
      : machine(setup.round, setup.liveness, setup.endpoint, now) {}

  Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);
  RoundMachine machine;
  std::map<NodeId, std::vector<ServerMessage>> inbox;
  std::map<NodeId, bool> closed;
  std::map<NodeId, bool> closed_as_lost;  // closed without waiting for the peer
  std::vector<std::string> log;

  void take(const Effects& fx) {
    for (const auto& m : fx.messages) {
      inbox[m.to].push_back(m.message);
      if (m.close) closed[m.to] = true;
      if (m.peer_lost) closed_as_lost[m.to] = true;
    }
    log.insert(log.end(), fx.log.begin(), fx.log.end());
  }
  void connect(NodeId id) { take(machine.connected(id, now)); }
  void send(NodeId id, const ClientMessage& m) { take(machine.received(id, m, now)); }
  void join(NodeId id, const std::string& host, int nproc = 1, int node_rank = -1) {
    NodeDescriptor n{
        host,      "10.0.0." + std::to_string(id), static_cast<std::int64_t>(1000 + id), nproc,
        node_rank, static_cast<int>(30000 + id)};
    send(id, Join{n});
  }
  void connect_and_join(NodeId id, const std::string& host, int nproc = 1, int node_rank = -1) {
    connect(id);
    join(id, host, nproc, node_rank);
  }
  // Connects and joins one node per host, as nodes 1, 2, ... in that order.
  void connect_and_join_all(const std::vector<std::string>& hosts) {
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      connect_and_join(static_cast<NodeId>(i + 1), hosts[i]);
    }
  }
  void advance(Clock::duration d) {
    now += d;
    take(machine.tick(now));
  }
  // Moves time forward through every deadline the machine asks for, keeping nodes in `alive`
  // heard from, up to `total`.
  void run_for(Clock::duration total, const std::vector<NodeId>& alive) {
    Clock::time_point end = now + total;
    while (now < end) {
      auto step = std::min<Clock::duration>(seconds(1), end - now);
      now += step;
      for (NodeId id : alive) {
        if (!closed[id]) take(machine.received(id, Heartbeat{}, now));
      }
      take(machine.tick(now));
    }
  }
  template <class T>
  const T* last(NodeId id) const {
    auto it = inbox.find(id);
    if (it == inbox.end()) return nullptr;
    for (auto m = it->second.rbegin(); m != it->second.rend(); ++m) {
      if (const T* t = std::get_if<T>(&*m)) return t;
    }
    return nullptr;
  }
  template <class T>
  int count(NodeId id) const {
    auto it = inbox.find(id);
    if (it == inbox.end()) return 0;
    int n = 0;
    for (const auto& m : it->second) n += std::holds_alternative<T>(m) ? 1 : 0;
    return n;
  }
};

Setup dynamic(int min, int max, int restarts = 0) {
  Setup c;
  c.round.min_nodes = min;
  c.round.max_nodes = max;
  c.round.max_restarts = restarts;
  c.endpoint = "node0:29400";
  return c;
}

Setup with_heartbeat_timeout(Setup c, Clock::duration timeout) {
  c.liveness.heartbeat_timeout = timeout;
  return c;
}

}  // namespace

TEST_CASE("a connection after the job ended learns its outcome", "[rendezvous]") {
  Harness h(dynamic(2, 2));
  h.connect_and_join(1, "a");
  h.connect_and_join(2, "b");
  h.send(1, Done{0});
  h.send(2, Done{0});
  REQUIRE(h.last<Stop>(1));
  for (NodeId id : {1, 2}) CHECK(h.closed[id]);
  h.connect(3);
  REQUIRE(h.last<Stop>(3));
  CHECK(h.last<Stop>(3)->cause == StopCause::finished);
}

TEST_CASE("a failed preflight's line is every node's to say, not the server's again",
          "[rendezvous]") {
  Harness h(dynamic(2, 2));
  h.connect_and_join_all({"a", "b"});
  REQUIRE(h.machine.phase() == RoundMachine::Phase::running);
  h.send(2, Abort{0, "preflight failed on b: b cannot reach a"});
  for (NodeId id : {1, 2}) {
    REQUIRE(h.last<Stop>(id));
    CHECK(h.last<Stop>(id)->reason == "preflight failed on b: b cannot reach a");
  }
  CHECK(std::count(h.log.begin(), h.log.end(), "job ends (preflight_failed)") == 1);
  for (const auto& line : h.log) CHECK_THAT(line, !Catch::Contains("cannot reach"));
}

TEST_CASE("missed heartbeats drop a node within the heartbeat timeout", "[rendezvous]") {
  Harness h(with_heartbeat_timeout(dynamic(1, 2, 1), seconds(15)));
  h.connect_and_join_all({"a", "b"});
  REQUIRE(h.machine.phase() == RoundMachine::Phase::running);
  // Node 2 goes silent; node 1 keeps sending heartbeats.
  h.run_for(seconds(14), {1});
  CHECK_FALSE(h.last<Restart>(1));
  h.run_for(seconds(1), {1});
  REQUIRE(h.last<Restart>(1));
  CHECK(h.last<Reject>(2));
  CHECK(h.closed[2]);
  // Silent past the timeout: the host must not linger waiting for it to acknowledge the close.
  CHECK(h.closed_as_lost[2]);
  CHECK_FALSE(h.closed_as_lost[1]);
  CHECK_THAT(h.last<Restart>(1)->reason, Catch::Contains("heartbeat timeout"));
}

TEST_CASE("only a node declared lost is closed without waiting for it", "[rendezvous]") {
  Harness h(with_heartbeat_timeout(dynamic(2, 3, 0), seconds(15)));
  h.connect_and_join_all({"a", "b", "c"});
  REQUIRE(h.machine.phase() == RoundMachine::Phase::running);
  SECTION("silent: the job ends, the others get their stop with the usual goodbye") {
    h.run_for(seconds(15), {1, 2});
    REQUIRE(h.last<Stop>(1));
    CHECK(h.last<Stop>(1)->cause == StopCause::node_lost);
    CHECK(h.closed_as_lost[3]);
    for (NodeId id : {1, 2}) {
      CHECK(h.closed[id]);
      CHECK_FALSE(h.closed_as_lost[id]);
    }
  }
  SECTION("a protocol violation is told to a live peer") {
    h.send(3, Hello{});
    REQUIRE(h.last<Reject>(3));
    CHECK(h.closed[3]);
    CHECK_FALSE(h.closed_as_lost[3]);
  }
}

TEST_CASE("nodes waiting for a round are told how it goes, at a modest rate", "[rendezvous]") {
  Setup c = dynamic(3, 3);
  c.round.join_timeout = seconds(600);
  c.round.status_interval = seconds(10);
  Harness h(c);
  h.connect_and_join(1, "a");
  h.run_for(seconds(12), {1});
  const Waiting* w = h.last<Waiting>(1);
  REQUIRE(w);
  CHECK(w->joined == 1);
  CHECK(w->min_nodes == 3);
  CHECK(w->waited_s == Approx(10));
  CHECK(w->timeout_s == Approx(600));
  int statuses = h.count<Waiting>(1);
  h.run_for(seconds(600 - 12 - 1), {1});
  CHECK_FALSE(h.last<Stop>(1));
  CHECK(h.count<Waiting>(1) - statuses < 60);  // a modest rate: one per status interval
}

TEST_CASE("static ranks: given node ranks, duplicates and out-of-range refused", "[rendezvous]") {
  Setup c;
  c.round.static_ranks = true;
  c.round.min_nodes = c.round.max_nodes = 3;
  c.round.static_master = MasterEndpoint{"node0", 29500};
  Harness h(c);
  h.connect_and_join(1, "z", 2, 0);
  h.connect_and_join(2, "a", 1, 2);
  h.connect_and_join(4, "dup", 1, 2);
  REQUIRE(h.last<Reject>(4));
  CHECK_THAT(h.last<Reject>(4)->reason, Catch::Contains("node rank 2 is already taken by a"));
  h.connect_and_join(5, "far", 1, 3);
  REQUIRE(h.last<Reject>(5));
  CHECK_THAT(h.last<Reject>(5)->reason, Catch::Contains("out of range"));
  CHECK(h.machine.phase() == RoundMachine::Phase::forming);
  h.connect_and_join(3, "m", 4, 1);
  REQUIRE(h.machine.phase() == RoundMachine::Phase::running);
  CHECK(h.last<Assignment>(1)->group_rank == 0);
  CHECK(h.last<Assignment>(3)->group_rank == 1);
  CHECK(h.last<Assignment>(3)->base_rank == 2);
  CHECK(h.last<Assignment>(2)->base_rank == 6);
  CHECK(h.last<Assignment>(2)->world_size == 7);
  CHECK(h.last<Assignment>(2)->master_addr == "node0");
  CHECK(h.last<Assignment>(2)->master_port == 29500);
  // A static job cannot go on without one of its nodes.
  h.take(h.machine.disconnected(2, "connection closed", h.now));
  REQUIRE(h.last<Stop>(1));
  CHECK(h.last<Stop>(1)->cause == StopCause::node_lost);
}

TEST_CASE("protocol misuse after the handshake drops only that node", "[rendezvous]") {
  Harness h(dynamic(2, 2));
  h.connect_and_join(1, "a");
  h.connect(2);
  h.send(2, Hello{});
  CHECK(h.closed[2]);
  CHECK(h.machine.waiting_count() == 1);
  CHECK(h.machine.phase() == RoundMachine::Phase::forming);
}

TEST_CASE("the hosting agent leaving ends the job for every other node, restarts or not",
          "[rendezvous]") {
  // Restarts left and MIN nodes remaining: a lost node would restart the job, but nothing can
  // go on without the server.
  Harness h(with_heartbeat_timeout(dynamic(1, 3, 2), seconds(15)));
  h.connect_and_join_all({"node0", "node1", "node2"});
  REQUIRE(h.machine.phase() == RoundMachine::Phase::running);
  SECTION("named, with the reason, the same stop as a node lost without restarts") {
    h.take(h.machine.host_left(1, "left: node0 stopped by SIGTERM", h.now));
    CHECK(h.machine.phase() == RoundMachine::Phase::ended);
    for (NodeId id : {2, 3}) {
      REQUIRE(h.last<Stop>(id));
      CHECK(h.count<Restart>(id) == 0);
      CHECK(h.last<Stop>(id)->cause == StopCause::node_lost);
      CHECK(h.last<Stop>(id)->exit_code == 1);
      CHECK(h.last<Stop>(id)->reason ==
            "node node0 (10.0.0.1, pid 1001) lost (left: node0 stopped by SIGTERM); it hosted the "
            "rendezvous at node0:29400, so the job cannot continue");
      CHECK(h.closed[id]);
      CHECK_FALSE(h.closed_as_lost[id]);
    }
    // The host's own connection is not told: its agent knows why it stops.
    CHECK_FALSE(h.last<Stop>(1));
    CHECK_FALSE(h.closed[1]);
    // Late arrivals learn the outcome, as after any end.
    h.connect(4);
    REQUIRE(h.last<Stop>(4));
    CHECK_THAT(h.last<Stop>(4)->reason, Catch::Contains("it hosted the rendezvous"));
  }
  SECTION("a peer already silent past the heartbeat timeout is not waited for") {
    h.now += seconds(15);
    h.take(h.machine.received(2, Heartbeat{}, h.now));
    h.take(h.machine.host_left(1, "left: node0 stopped by SIGINT", h.now));
    REQUIRE(h.last<Stop>(3));
    CHECK(h.closed_as_lost[3]);
    CHECK_FALSE(h.closed_as_lost[2]);
  }
  SECTION("after the job ended nothing more is sent") {
    for (NodeId id : {1, 2, 3}) h.send(id, Done{0});
    REQUIRE(h.last<Stop>(2));
    const std::size_t before = h.inbox[2].size();
    h.take(h.machine.host_left(1, "left: node0 stopped by SIGTERM", h.now));
    CHECK(h.inbox[2].size() == before);
    CHECK(h.last<Stop>(2)->cause == StopCause::finished);
  }
}

TEST_CASE("the hosting agent leaving while a round forms stops the waiting nodes", "[rendezvous]") {
  Harness h(dynamic(3, 3));
  h.connect_and_join(2, "node1");
  SECTION("its own connection not admitted yet: the stop names the endpoint") {
    h.take(h.machine.host_left(std::nullopt, "left: node0 stopped by SIGINT", h.now));
    REQUIRE(h.last<Stop>(2));
    CHECK(h.last<Stop>(2)->exit_code == 1);
    CHECK(h.last<Stop>(2)->reason ==
          "the node hosting the rendezvous at node0:29400 is gone (left: node0 stopped by "
          "SIGINT), so the job cannot continue");
  }
  SECTION("joined: the stop names it") {
    h.connect_and_join(1, "node0");
    REQUIRE(h.machine.phase() == RoundMachine::Phase::forming);
    h.take(h.machine.host_left(1, "left: node0 stopped by SIGINT", h.now));
    REQUIRE(h.last<Stop>(2));
    CHECK_THAT(h.last<Stop>(2)->reason, Catch::StartsWith("node node0 (10.0.0.1, pid 1001) lost"));
  }
  CHECK(h.machine.phase() == RoundMachine::Phase::ended);
}
