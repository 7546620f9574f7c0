#include "trainrun/rendezvous/handler.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>

#include "socket_harness.hpp"
#include "test_support.hpp"

using namespace trainrun::rendezvous;
using namespace trainrun::rendezvous::test;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

struct Node {
  std::unique_ptr<RendezvousHandler> handler;
  std::optional<Assignment> assignment;
  std::optional<Stop> stop;
  std::vector<std::string> log;

  Node(asio::io_context& io, TcpRendezvousOptions o) {
    handler = make_rendezvous_handler(io, std::move(o),
                                      [this](const std::string& l) { log.push_back(l); });
    ClientEvents e;
    e.on_assignment = [this](const Assignment& a) { assignment = a; };
    e.on_stop = [this](const Stop& s) { stop = s; };
    handler->start(e);
  }
};

// A two-node job on a local port.
TcpRendezvousOptions two_node_options(int port) {
  TcpRendezvousOptions o;
  o.endpoint = HostPort{"127.0.0.1", port};
  o.credentials.run_id = "job7";
  o.round.min_nodes = o.round.max_nodes = 2;
  return o;
}

// A two-node job on the port `holder` holds: the agent can neither host nor connect there.
TcpRendezvousOptions held_port_options(const BoundNotListening& holder,
                                       std::chrono::milliseconds refused_grace,
                                       std::chrono::milliseconds join_timeout) {
  TcpRendezvousOptions o = two_node_options(holder.port());
  o.connection.refused_grace = refused_grace;
  o.round.join_timeout = join_timeout;
  return o;
}

}  // namespace

TEST_CASE("the agent owning a local endpoint hosts it; the others connect", "[rendezvous]") {
  asio::io_context io;
  TcpRendezvousOptions o = two_node_options(trainrun::test::free_port());
  Node a(io, o);
  a.handler->join({2, 31000});
  // The first agent binds the endpoint before the second one tries.
  REQUIRE(run_until(io, [&] { return a.handler->hosting(); }));
  Node b(io, o);
  b.handler->join({3, 31001});
  REQUIRE(run_until(io, [&] { return a.assignment && b.assignment; }));
  CHECK_FALSE(b.handler->hosting());
  CHECK(a.assignment->world_size == 5);
  CHECK(a.assignment->group_rank + b.assignment->group_rank == 1);
  const Assignment& rank0 = a.assignment->group_rank == 0 ? *a.assignment : *b.assignment;
  CHECK(a.assignment->master_port == rank0.master_port);
  CHECK((rank0.master_port == 31000 || rank0.master_port == 31001));
  a.handler->report_done();
  b.handler->report_done();
  REQUIRE(run_until(io, [&] { return a.stop && b.stop; }));
  CHECK(a.stop->cause == StopCause::finished);
  CHECK(b.stop->cause == StopCause::finished);
}

TEST_CASE("static backend: node 0 hosts, ranks are the given node ranks", "[rendezvous]") {
  asio::io_context io;
  TcpRendezvousOptions o;
  o.round.static_ranks = true;
  o.endpoint = HostPort{"127.0.0.1", trainrun::test::free_port()};
  o.credentials.run_id = "none";
  o.round.min_nodes = o.round.max_nodes = 2;
  o.round.static_master = MasterEndpoint{"127.0.0.1", 29555};
  TcpRendezvousOptions o1 = o;
  o1.node_rank = 1;
  Node one(io, o1);  // node 1 starts first and waits for the server to appear
  one.handler->join({1, 0});
  TcpRendezvousOptions o0 = o;
  o0.node_rank = 0;
  Node zero(io, o0);
  zero.handler->join({2, 0});
  REQUIRE(run_until(io, [&] { return zero.assignment && one.assignment; }));
  CHECK(zero.handler->hosting());
  CHECK(zero.assignment->group_rank == 0);
  CHECK(one.assignment->group_rank == 1);
  CHECK(one.assignment->base_rank == 2);
  CHECK(one.assignment->master_addr == "127.0.0.1");
  CHECK(one.assignment->master_port == 29555);
}

TEST_CASE("is_host=1 on a taken port fails with a clear message", "[rendezvous]") {
  asio::io_context io;
  asio::ip::tcp::acceptor taken(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  TcpRendezvousOptions o;
  o.endpoint = HostPort{"127.0.0.1", taken.local_endpoint().port()};
  o.credentials.run_id = "job7";
  o.is_host = true;
  auto h = make_rendezvous_handler(io, o, nullptr);
  CHECK_THROWS_WITH(h->start({}), Catch::Contains("cannot host the rendezvous on 127.0.0.1:"));
}

TEST_CASE("the waiting status is logged", "[rendezvous]") {
  asio::io_context io;
  TcpRendezvousOptions o = two_node_options(trainrun::test::free_port());
  Node a(io, o);
  a.handler->join({1, 31000});
  REQUIRE(run_until(io, [&] {
    for (const auto& l : a.log) {
      if (l.find("waiting for nodes: 1 of 2 joined, 0 s of 600 s") != std::string::npos)
        return true;
    }
    return false;
  }));
}

TEST_CASE("after the job ends the hosting agent's loop runs out of work at once", "[rendezvous]") {
  asio::io_context io;
  TcpRendezvousOptions o = two_node_options(trainrun::test::free_port());
  Node a(io, o);
  a.handler->join({1, 31000});
  REQUIRE(run_until(io, [&] { return a.handler->hosting(); }));
  Node b(io, o);
  b.handler->join({1, 31001});
  REQUIRE(run_until(io, [&] { return a.assignment && b.assignment; }));
  a.handler->report_done();
  b.handler->report_done();
  REQUIRE(run_until(io, [&] { return a.stop && b.stop; }));
  // What an agent does after on_stop: run the loop until it has no work left. The server's
  // acceptor and keep-alive timer must not hold it for the whole bound.
  CHECK(run_out_of_work(io) < 2s);
  CHECK(io.stopped());
}

TEST_CASE("a local endpoint whose port a non-listening process holds fails clearly and early",
          "[rendezvous]") {
  asio::io_context io;
  // Bound, never listening, without SO_REUSEADDR: the agent can neither host nor connect.
  BoundNotListening holder(io);
  TcpRendezvousOptions o = held_port_options(holder, 500ms, 120s);
  Node a(io, o);
  a.handler->join({1, 31000});
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_until(
      io, [&] { return a.stop.has_value(); }, 20s));
  CHECK(std::chrono::steady_clock::now() - t0 >= 500ms);
  CHECK_FALSE(a.handler->hosting());
  CHECK(a.stop->cause == StopCause::rejected);
  CHECK(a.stop->exit_code == 1);
  CHECK_THAT(a.stop->reason,
             Catch::StartsWith("rendezvous endpoint 127.0.0.1:" + std::to_string(o.endpoint.port) +
                               ": the port is in use by another process that is not a trainrun "
                               "rendezvous host (bind: Address already in use; connect: "
                               "Connection refused)"));
}

TEST_CASE("is_host=0 never judges the port: a host may still come", "[rendezvous]") {
  asio::io_context io;
  BoundNotListening holder(io);
  TcpRendezvousOptions o = held_port_options(holder, 100ms, 1s);  // the timeout well past the grace
  o.is_host = false;
  Node a(io, o);
  a.handler->join({1, 31000});
  REQUIRE(run_until(
      io, [&] { return a.stop.has_value(); }, 20s));
  CHECK(a.stop->cause == StopCause::join_timeout);
  CHECK_THAT(a.stop->reason, Catch::Contains("not reachable after 1 s ("));
  CHECK_THAT(a.stop->reason, Catch::Contains(" attempts failed: Connection refused x"));
}

TEST_CASE("a stopped hosting agent ends the job for the others as a stopped node does",
          "[rendezvous]") {
  asio::io_context io;
  TcpRendezvousOptions o = two_node_options(trainrun::test::free_port());
  o.is_host = true;
  Node host(io, o);
  host.handler->join({1, 31000});
  o.is_host = false;
  Node other(io, o);
  other.handler->join({1, 31001});
  REQUIRE(run_until(io, [&] { return host.assignment && other.assignment; }));
  REQUIRE(host.handler->hosting());
  SECTION("the other node stopped: the host is told") {
    other.handler->shutdown("node1 stopped by SIGTERM");
    REQUIRE(run_until(io, [&] { return host.stop.has_value(); }));
    CHECK(host.stop->cause == StopCause::node_lost);
    CHECK(host.stop->exit_code == 1);
    CHECK_THAT(host.stop->reason, Catch::Contains("(left: node1 stopped by SIGTERM)"));
  }
  SECTION("the host stopped: the other node is told who and why, not only that it lost it") {
    host.handler->shutdown("node0 stopped by SIGTERM");
    REQUIRE(run_until(io, [&] { return other.stop.has_value(); }));
    CHECK(other.stop->cause == StopCause::node_lost);
    CHECK(other.stop->exit_code == 1);
    CHECK_THAT(other.stop->reason,
               Catch::Contains(fmt::format("pid {}) lost (left: node0 stopped by SIGTERM); it "
                                           "hosted the rendezvous at 127.0.0.1:{}",
                                           ::getpid(), o.endpoint.port)));
    CHECK_FALSE(host.stop);  // it left: no event after shutdown
    // The host's loop runs out of work once the other node has its stop.
    CHECK(run_out_of_work(io) < 2s);
    CHECK(io.stopped());
  }
}
