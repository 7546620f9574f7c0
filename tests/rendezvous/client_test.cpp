#include "trainrun/rendezvous/client.hpp"

#include <boost/asio/ip/address.hpp>
#include <catch2/catch.hpp>

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
