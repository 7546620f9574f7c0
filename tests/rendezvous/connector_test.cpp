#include "connector.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <optional>

#include "socket_harness.hpp"

using namespace trainrun::rendezvous;
using namespace trainrun::rendezvous::test;
using namespace std::chrono_literals;
namespace asio = boost::asio;

TEST_CASE("connector: giving up says whether the endpoint was ever reached", "[connector]") {
  const Stop never = unreachable_stop("h:1", 2s, 0, "3 attempts failed: refused x3");
  CHECK(never.refusal == Refusal::unreachable);
  CHECK(never.reason ==
        "rendezvous endpoint h:1 not reachable after 2 s (3 attempts failed: refused x3)");
  const Stop cut = unreachable_stop("h:1", 2s, 1, "1 attempt failed: closed x1");
  CHECK(cut.refusal == Refusal::no_handshake);
  CHECK(cut.reason ==
        "rendezvous endpoint h:1: no handshake completed in 2 s (1 connection; 1 attempt failed: "
        "closed x1)");
}

TEST_CASE("connector: retries until the endpoint listens; a lost connection is tried again",
          "[connector]") {
  asio::io_context io;
  // A free port, released: the first attempts are refused.
  asio::ip::tcp::acceptor probe(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  const int port = probe.local_endpoint().port();
  probe.close();
  ClientOptions o;
  o.endpoint = HostPort{"127.0.0.1", port};
  o.deadline = 30s;
  std::vector<std::string> log;
  o.log = [&](const std::string& line) { log.push_back(line); };
  int connected = 0;
  std::optional<Stop> stop;
  auto connector = std::make_shared<Connector>(
      io, o, [&](asio::ip::tcp::socket) { ++connected; }, [&](const Stop& s) { stop = s; });
  connector->start();
  REQUIRE(run_until(io, [&] { return !log.empty(); }));
  CHECK_THAT(log.front(), Catch::Contains("not reachable yet") && Catch::Contains("retrying"));
  asio::ip::tcp::acceptor listening(
      io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port));
  REQUIRE(run_until(io, [&] { return connected == 1; }));
  connector->retry("connection closed during the handshake");
  REQUIRE(run_until(io, [&] { return connected == 2; }));
  CHECK(connector->connections() == 2);
  CHECK_FALSE(stop);
}
