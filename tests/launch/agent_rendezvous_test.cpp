#include "agent/agent_rendezvous.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <string>

using namespace trainrun::launch;

TEST_CASE("--node-rank is asked for in a dynamic job, and is the node rank in a static one",
          "[agent]") {
  LaunchConfig c;
  CHECK(preferred_rank(c) == -1);
  c.node_rank = 2;
  c.node_rank_given = true;
  c.rdzv_backend = RendezvousBackend::static_;
  CHECK(preferred_rank(c) == -1);
  c.rdzv_backend = RendezvousBackend::c10d;
  CHECK(preferred_rank(c) == 2);
  c.node_rank_given = false;
  CHECK(preferred_rank(c) == -1);
}

TEST_CASE("a node that has left the rendezvous answers for the others that it has", "[agent]") {
  boost::asio::io_context io;
  LaunchConfig c;
  AgentRendezvous rdzv(io, c, "hosta", [](const std::string&) {});
  std::string error;
  nlohmann::json nodes;
  rdzv.ask_others([&](nlohmann::json n, nlohmann::json, std::string e) {
    nodes = std::move(n);
    error = std::move(e);
  });
  CHECK(nodes == nlohmann::json::array());
  CHECK(error == "this node has left the rendezvous");
}
