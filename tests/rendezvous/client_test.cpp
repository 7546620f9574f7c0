#include "trainrun/rendezvous/client.hpp"

#include <boost/asio/ip/address.hpp>
#include <catch2/catch.hpp>

#include "client_stops.hpp"
#include "trainrun/base/system.hpp"

using namespace trainrun::rendezvous;
namespace asio = boost::asio;

TEST_CASE("client: the address a join advertises", "[client]") {
  const auto lan = asio::ip::make_address("10.1.2.3");
  const auto loopback = asio::ip::make_address("127.0.0.1");
  NodeDescriptor node;
  CHECK(advertised(node, lan, "rdzv-host").addr == "10.1.2.3");
  CHECK(advertised(node, loopback, "localhost").addr == "127.0.0.1");
  CHECK(advertised(node, loopback, "127.0.0.1").addr == "127.0.0.1");
  // A loopback end reached through a host name: the others must reach this node by its name.
  CHECK(advertised(node, loopback, "rdzv-host").addr == trainrun::host_name());
  CHECK(advertised(node, lan, "rdzv-host").host == trainrun::host_name());
  node.addr = "192.168.0.9";
  node.host = "given";
  CHECK(advertised(node, loopback, "rdzv-host").addr == "192.168.0.9");
  CHECK(advertised(node, loopback, "rdzv-host").host == "given");
}

TEST_CASE("client: what ends it says what happened, at which endpoint", "[client]") {
  const ClientStops stops{"rdzv-host:29400"};
  const Stop lost = stops.silent(std::chrono::seconds(30));
  CHECK(lost.cause == StopCause::server_lost);
  CHECK(lost.reason ==
        "lost the rendezvous server at rdzv-host:29400: no message for 30 s (heartbeat timeout)");
  // Tampering before admission is a refusal; after it, the server is lost to this node.
  CHECK(stops.tampered("bad seal", false).cause == StopCause::rejected);
  CHECK(stops.tampered("bad seal", true).cause == StopCause::server_lost);
  const Stop host = stops.not_a_host("it sent HTTP");
  CHECK(host.refusal == Refusal::not_a_host);
  CHECK_THAT(host.reason, Catch::Contains("rdzv-host:29400") && Catch::Contains("it sent HTTP"));
  const Stop dropped = stops.dropped(Reject{"the job is full", Refusal::none});
  CHECK(dropped.reason == "the rendezvous at rdzv-host:29400 dropped this node: the job is full");
  CHECK(stops.refused("bad token", Refusal::token).refusal == Refusal::token);
  CHECK(stops.refused_server("bad proof").exit_code == 1);
}
