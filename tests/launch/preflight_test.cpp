#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "parse_helpers.hpp"
#include "sample_offer.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/preflight/local_offer.hpp"
#include "trainrun/launch/preflight/preflight_checks.hpp"
#include "trainrun/launch/preflight/preflight_probe.hpp"

using namespace trainrun::launch;
using trainrun::rendezvous::PreflightOffer;
using trainrun::rendezvous::PreflightPeer;

namespace {

PreflightOffer offer() { return trainrun::testing::sample_offer(); }

PreflightPeer node0(PreflightOffer o = offer()) {
  o.network = "0000000000000000";
  return PreflightPeer{0, "node0", "10.0.0.1", o};
}

const PreflightNode kMe{"node1", 1, "10.0.0.2"};

}  // namespace

TEST_CASE("--preflight and --no-preflight", "[preflight]") {
  using trainrun::test::parse;
  CHECK(parse({"x"}).preflight == PreflightMode::on);
  CHECK(parse({"--preflight=warn", "x"}).preflight == PreflightMode::warn);
  CHECK(parse({"--preflight=off", "x"}).preflight == PreflightMode::off);
  CHECK(parse({"--no-preflight", "x"}).preflight == PreflightMode::off);
  CHECK(parse({"x"}, {{"PET_NO_PREFLIGHT", "1"}}).preflight == PreflightMode::off);
  CHECK_THROWS_WITH(parse({"--preflight=maybe", "x"}), "--preflight=maybe: use on, warn or off");
  CHECK_THROWS_AS(parse({"--no-preflight", "--preflight=warn", "x"}), UsageError);
}

TEST_CASE("a node that runs another script, trainrun, Python or torch is named", "[preflight]") {
  CHECK(consistency_findings(kMe, offer(), {node0()}, PreflightMode::on).empty());

  PreflightOffer other = offer();
  other.sha256 = std::string(64, 'b');
  auto f = consistency_findings(kMe, offer(), {node0(other)}, PreflightMode::on);
  REQUIRE(f.size() == 1);
  CHECK(f[0].error);
  CHECK(f[0].line ==
        "node1 runs train.py (SHA-256 aaaaaaaaaaaa), node0 (group rank 0) runs train.py (SHA-256 "
        "bbbbbbbbbbbb): the entrypoint differs between the nodes; put the same file on every node "
        "(a shared file system, or copy it)");

  other = offer();
  other.trainrun = "0.8.0";
  other.torch = "";
  f = consistency_findings(kMe, offer(), {node0(other)}, PreflightMode::warn);
  REQUIRE(f.size() == 2);
  CHECK_FALSE(f[0].error);
  CHECK(f[0].line ==
        "node1 runs trainrun 0.9.0, node0 (group rank 0) trainrun 0.8.0: install the same "
        "version on every node (a warning with --preflight=warn)");
  CHECK(f[1].line.find("node0 (group rank 0)'s torch (none)") != std::string::npos);

  // The same version elsewhere is another interpreter, which may not import the same torch.
  PreflightOffer mine = offer();
  mine.python = "3.11.2 (/home/me/venv/bin/python3)";
  other = offer();
  other.python = "3.11.2 (/usr/bin/python3)";
  f = consistency_findings(kMe, mine, {node0(other)}, PreflightMode::on);
  REQUIRE(f.size() == 1);
  CHECK(f[0].line ==
        "node1's workers run Python 3.11.2 (/home/me/venv/bin/python3), node0 (group rank 0)'s "
        "Python 3.11.2 (/usr/bin/python3): use the same environment on every node (PYTHON_EXEC)");
}

TEST_CASE("MASTER_ADDR must resolve, and not to loopback where rank 0 runs elsewhere",
          "[preflight]") {
  CHECK(is_loopback_address("127.0.1.1"));
  CHECK(is_loopback_address("::1"));
  CHECK(is_loopback_address("::ffff:127.0.0.1"));
  CHECK_FALSE(is_loopback_address("10.0.0.1"));
  CHECK_FALSE(is_loopback_address("node0"));

  CHECK_FALSE(master_addr_finding(kMe, "node0", {"10.0.0.1"}, "", true));
  // Agents that share a network stack share its loopback: one machine's test job is fine.
  CHECK_FALSE(master_addr_finding(kMe, "localhost", {"127.0.0.1"}, "", false));
  auto f = master_addr_finding(kMe, "node0", {"127.0.1.1"}, "", true);
  REQUIRE(f);
  CHECK(f->error);
  CHECK(f->line.rfind("MASTER_ADDR node0 resolves to 127.0.1.1 on node1, a loopback address, but "
                      "group rank 0 runs on another machine",
                      0) == 0);
  f = master_addr_finding(kMe, "nowhere", {}, "Host not found", true);
  REQUIRE(f);
  CHECK(f->line.rfind("MASTER_ADDR nowhere does not resolve on node1: Host not found", 0) == 0);
}

TEST_CASE("a broken link names both nodes, the direction, the port and the fix", "[preflight]") {
  LinkCheck link;
  link.peer = node0();
  link.target = "10.0.0.1";
  link.via_master_addr = true;
  link.outcome = LinkOutcome::ok;
  CHECK_FALSE(link_finding(kMe, link, "32768-60999"));

  link.outcome = LinkOutcome::timed_out;
  link.detail = "5 s";
  auto f = link_finding(kMe, link, "32768-60999");
  REQUIRE(f);
  CHECK(f->error);
  CHECK(f->line ==
        "node1 (group rank 1, 10.0.0.2) cannot open a TCP connection to node0 (group rank 0) at "
        "10.0.0.1:40001 (MASTER_ADDR): no answer (5 s); the workers would hang in "
        "init_process_group. Likely fix: let TCP from 10.0.0.2 to 10.0.0.1 through on the ports "
        "the process group uses (the "
        "ephemeral range, 32768-60999 here) — a firewall rule, or, if 10.0.0.1 is not the "
        "address node0 is reached by from node1, make it advertise one that is (--local-addr) "
        "and set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the interface of the network the "
        "nodes share");

  link.outcome = LinkOutcome::unreachable;
  link.detail = "No route to host";
  f = link_finding(kMe, link, "");
  REQUIRE(f);
  // An address the others cannot reach: the interface first.
  CHECK(f->line.find("Likely fix: if 10.0.0.1 is not the address") != std::string::npos);
  CHECK(f->line.find("(the ephemeral range) — a firewall rule") != std::string::npos);

  CHECK(preflight_failure(kMe, {{false, "a warning"}, *f, {true, "second"}}) ==
        "preflight failed on node1: " + f->line + "; second");
}

TEST_CASE("a clock off by more than the bound is a warning", "[preflight]") {
  LinkCheck link;
  link.peer = node0();
  link.outcome = LinkOutcome::ok;
  link.clock_offset_s = 0.4;
  CHECK_FALSE(clock_finding(kMe, link));
  link.clock_offset_s = -3.25;
  auto f = clock_finding(kMe, link);
  REQUIRE(f);
  CHECK_FALSE(f->error);
  CHECK(f->line.rfind("the clock of node0 (group rank 0) is 3.2 s behind that of node1", 0) == 0);
  CHECK(clock_offset(100.0, 90.0, 92.0) == 9.0);
}

TEST_CASE("the greeting names the agent and its clock", "[preflight]") {
  auto g = parse_preflight_greeting(preflight_greeting("0123456789abcdef", 1700000000.5));
  REQUIRE(g);
  CHECK(g->id == "0123456789abcdef");
  CHECK(g->time == 1700000000.5);
  CHECK_FALSE(parse_preflight_greeting("SSH-2.0-OpenSSH_9.2p1"));
  CHECK_FALSE(parse_preflight_greeting("trainrun-preflight id nan"));
}

TEST_CASE("a probe reaches a listener, and tells a closed port and another agent apart",
          "[preflight]") {
  boost::asio::io_context io;
  PreflightListener listener(io, "0123456789abcdef");
  CHECK(listener.port() > 0);
  std::vector<LinkCheck> results;
  auto probe = [&](const std::string& id, int port) {
    LinkCheck link;
    link.peer = node0();
    link.peer.offer.id = id;
    link.peer.offer.port = port;
    link.target = "127.0.0.1";
    return probe_link(io, link, std::chrono::seconds(5),
                      [&](LinkCheck done) { results.push_back(std::move(done)); });
  };
  // A port that was just free: nothing listens there.
  int closed = 0;
  {
    PreflightListener gone(io, "ffffffffffffffff");
    closed = gone.port();
  }
  auto a = probe("0123456789abcdef", listener.port());
  auto b = probe("ffffffffffffffff", listener.port());
  auto c = probe("0123456789abcdef", closed);
  while (results.size() < 3 && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  REQUIRE(results.size() == 3);
  for (const auto& r : results) {
    if (r.peer.offer.port == closed) {
      CHECK(r.outcome == LinkOutcome::refused);
    } else if (r.peer.offer.id == "ffffffffffffffff") {
      CHECK(r.outcome == LinkOutcome::wrong_peer);
    } else {
      CHECK(r.outcome == LinkOutcome::ok);
      REQUIRE(r.clock_offset_s);
      CHECK(std::abs(*r.clock_offset_s) < 1.0);
    }
  }
}

TEST_CASE("the local offer hashes the entrypoint and names the network stack", "[preflight]") {
  LocalRun run;
  run.entrypoint = "/proc/self/nonexistent";
  run.entrypoint_file = "/dev/null";
  auto o = local_offer(40001, run);
  CHECK(o.id.size() == 16);
  CHECK(o.port == 40001);
  // SHA-256 of nothing.
  CHECK(o.sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(o.network == network_identity());
  CHECK(o.network.size() == 16);
  CHECK(local_offer(40001, run).id != o.id);
}
