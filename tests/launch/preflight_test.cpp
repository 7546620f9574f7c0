#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "parse_helpers.hpp"
#include "sample_offer.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/listen.hpp"
#include "trainrun/launch/preflight/local_offer.hpp"
#include "trainrun/launch/preflight/preflight_checks.hpp"
#include "trainrun/launch/preflight/preflight_probe.hpp"
#include "trainrun/launch/workers/port.hpp"

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

TEST_CASE("a blocked MASTER_PORT names both nodes, the port and the fix", "[preflight]") {
  LinkCheck link;
  link.peer = node0();
  link.target = "node0";
  link.via_master_addr = true;
  link.master_port = 29500;
  link.outcome = LinkOutcome::timed_out;
  link.detail = "5 s";
  CHECK(link_port(link) == 29500);
  auto f = link_finding(kMe, link, "32768-60999");
  REQUIRE(f);
  CHECK(f->error);
  CHECK(f->line ==
        "node1 (group rank 1, 10.0.0.2) cannot open a TCP connection to node0 (group rank 0) at "
        "node0:29500 (MASTER_PORT): no answer (5 s); the workers would hang in "
        "init_process_group. Likely fix: let TCP from 10.0.0.2 to node0 through on port 29500, "
        "MASTER_PORT, where every worker connects to the store of group rank 0 — a firewall "
        "rule; or choose a MASTER_PORT it lets through (--master-port, with a static "
        "rendezvous; a dynamic one takes a free port of group rank 0's ephemeral range)");

  // Group rank 0's side: every node checked, one did not, or the port could not be opened.
  const PreflightNode rank0{"node0", 0, "10.0.0.1"};
  CHECK_FALSE(master_port_finding(rank0, "node0", 29500, 3, 3, 10, ""));
  f = master_port_finding(rank0, "node0", 29500, 3, 2, 10, "");
  REQUIRE(f);
  CHECK(f->error);
  CHECK(f->line ==
        "node0 (group rank 0, 10.0.0.1): 1 of 3 other nodes did not open a TCP connection to "
        "node0:29500 (MASTER_PORT) within 10 s; the workers would hang in init_process_group. "
        "Likely fix: let TCP from the other nodes to node0 through on port 29500, MASTER_PORT — "
        "a firewall rule");
  f = master_port_finding(rank0, "node0", 29500, 3, 0, 10, "Address already in use");
  REQUIRE(f);
  CHECK(f->line.rfind("node0 (group rank 0, 10.0.0.1) cannot listen on node0:29500 (MASTER_PORT) "
                      "for the other nodes to check it: Address already in use;",
                      0) == 0);
}

namespace {

// Runs `io` until `done` holds, at most 30 s.
template <class Done>
void run_until(boost::asio::io_context& io, Done done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done() && std::chrono::steady_clock::now() < end)
    io.run_one_for(std::chrono::milliseconds(100));
}

// A free port, as MASTER_PORT is held for the workers: bound with SO_REUSEADDR, not listening.
int held_free_port(std::optional<HeldPort>& held) {
  held.emplace(0);
  return held->port();
}

}  // namespace

TEST_CASE("group rank 0 keeps MASTER_PORT open until every node has checked it", "[preflight]") {
  boost::asio::io_context io;
  std::optional<HeldPort> held;
  const int port = held_free_port(held);
  const std::string rank0_id = "0123456789abcdef";
  std::vector<LinkCheck> links;
  auto probe = [&](const std::string& my_id) {
    LinkCheck link;
    link.peer = node0();
    link.peer.offer.id = rank0_id;
    link.target = "127.0.0.1";
    link.via_master_addr = true;
    link.master_port = port;
    return probe_link(
        io, link, std::chrono::seconds(5), [&](LinkCheck done) { links.push_back(done); },
        preflight_greeting(my_id, 0));
  };
  // The first node checks before group rank 0 opens the port (its assignment came later): it is
  // refused, and tries again.
  auto early = probe("1111111111111111");
  io.run_for(std::chrono::milliseconds(300));
  std::optional<std::pair<int, std::string>> result;
  auto wait = wait_for_master_checks(
      io, port, rank0_id, 2, std::chrono::seconds(20),
      [&](int checked, std::string problem) { result.emplace(checked, problem); });
  run_until(io, [&] { return links.size() == 1; });
  REQUIRE(links.size() == 1);
  CHECK(links[0].outcome == LinkOutcome::ok);
  CHECK_FALSE(links[0].clock_offset_s);  // the preflight port's answer gives it
  CHECK_FALSE(result);                   // one of two
  auto late = probe("2222222222222222");
  run_until(io, [&] { return result && links.size() == 2; });
  REQUIRE(result);
  CHECK(*result == std::make_pair(2, std::string()));
  REQUIRE(links.size() == 2);
  CHECK(links[1].outcome == LinkOutcome::ok);
  // Closed once every node has checked: a worker's store can listen there now.
  boost::asio::ip::tcp::acceptor store(io);
  CHECK_FALSE(listen_on_every_address(store, static_cast<unsigned short>(port), true));
}

TEST_CASE("group rank 0 names a MASTER_PORT that no node reached, or that it cannot open",
          "[preflight]") {
  boost::asio::io_context io;
  std::optional<HeldPort> held;
  const int port = held_free_port(held);
  std::optional<std::pair<int, std::string>> result;
  auto done = [&](int checked, std::string problem) { result.emplace(checked, problem); };
  auto wait =
      wait_for_master_checks(io, port, "0123456789abcdef", 1, std::chrono::milliseconds(200), done);
  run_until(io, [&] { return result.has_value(); });
  REQUIRE(result);
  CHECK(*result == std::make_pair(0, std::string()));

  // Another program listens there: no node could check it, and no worker's store listen.
  boost::asio::ip::tcp::acceptor other(io);
  REQUIRE_FALSE(listen_on_every_address(other, static_cast<unsigned short>(port), true));
  result.reset();
  wait = wait_for_master_checks(io, port, "0123456789abcdef", 1, std::chrono::seconds(20), done);
  run_until(io, [&] { return result.has_value(); });
  REQUIRE(result);
  CHECK(result->first == 0);
  CHECK_FALSE(result->second.empty());
}

TEST_CASE("a MASTER_PORT that stays refused is named refused, with the attempts", "[preflight]") {
  boost::asio::io_context io;
  std::optional<HeldPort> held;
  const int port = held_free_port(held);
  std::optional<LinkCheck> result;
  LinkCheck link;
  link.peer = node0();
  link.target = "127.0.0.1";
  link.via_master_addr = true;
  link.master_port = port;
  auto probe = probe_link(
      io, link, std::chrono::milliseconds(500), [&](LinkCheck done) { result = done; }, "x\n");
  run_until(io, [&] { return result.has_value(); });
  REQUIRE(result);
  CHECK(result->outcome == LinkOutcome::refused);
  CHECK(result->detail.find("attempts failed: Connection refused x") != std::string::npos);
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
  CHECK(o.master_check);
}
