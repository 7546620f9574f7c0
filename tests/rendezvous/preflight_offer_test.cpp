#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "etcd_round.hpp"
#include "rank_assignment.hpp"
#include "sample_offer.hpp"
#include "trainrun/rendezvous/messages.hpp"

using namespace trainrun::rendezvous;

namespace {

PreflightOffer offer(int port) { return trainrun::testing::sample_offer(port); }

NodeDescriptor node(const std::string& host, int port) {
  NodeDescriptor n{host, "10.0.0." + std::to_string(port % 250), port, 2, -1, 29500};
  n.preflight = offer(port);
  return n;
}

}  // namespace

TEST_CASE("each node checks group rank 0 and its ring neighbours, never N of them", "[preflight]") {
  CHECK(preflight_peer_ranks(0, 1).empty());
  CHECK(preflight_peer_ranks(0, 2) == std::vector<int>{1});
  CHECK(preflight_peer_ranks(1, 2) == std::vector<int>{0});
  CHECK(preflight_peer_ranks(0, 5) == std::vector<int>{1, 4});
  CHECK(preflight_peer_ranks(2, 5) == std::vector<int>{0, 3, 1});
  // Every node is checked by both neighbours: the links i -> i+1 and i+1 -> i.
  const int world = 16384;
  std::set<std::pair<int, int>> links;
  for (int g = 0; g < world; ++g) {
    const auto peers = preflight_peer_ranks(g, world);
    CHECK(peers.size() <= kMaxPreflightPeers);
    for (int p : peers) links.insert({g, p});
  }
  CHECK(links.size() <= 3u * world);
  for (int g = 0; g < world; ++g) {
    CHECK(links.count({g, (g + 1) % world}) == 1);
    CHECK(links.count({(g + 1) % world, g}) == 1);
  }
}

TEST_CASE("the offer travels in the join, versioned and bounded", "[preflight]") {
  Join j{node("node1", 40001)};
  Join back = std::get<Join>(decode_client_message(encode(ClientMessage{j})));
  REQUIRE(back.node.preflight);
  CHECK(*back.node.preflight == offer(40001));

  // A join without an offer (--no-preflight, an older trainrun) has none.
  Join plain{NodeDescriptor{"node2", "", 7, 1, -1, 29500}};
  CHECK_FALSE(std::get<Join>(decode_client_message(encode(ClientMessage{plain}))).node.preflight);

  // Another preflight version is not understood: ignored, the join still good.
  std::string later = encode(ClientMessage{j});
  later.replace(later.find("\"v\":1"), 5, "\"v\":7");
  CHECK_FALSE(std::get<Join>(decode_client_message(later)).node.preflight);

  // A version of the known one that breaks its bounds is refused, naming the field.
  std::string bad = encode(ClientMessage{j});
  bad.replace(bad.find("0123456789abcdef"), 16, "not-hex-not-hex!");
  CHECK_THROWS_WITH(decode_client_message(bad), Catch::Contains("\"id\""));
  Join huge = j;
  huge.node.preflight->torch = std::string(kMaxPreflightText + 1, 'x');
  CHECK_THROWS_WITH(decode_client_message(encode(ClientMessage{huge})),
                    Catch::Contains("\"torch\""));
}

TEST_CASE("the assignment carries the offers of the nodes to check", "[preflight]") {
  std::vector<NodeDescriptor> nodes;
  for (int i = 0; i < 5; ++i) nodes.push_back(node("node" + std::to_string(i), 40000 + i));
  nodes[3].preflight.reset();  // this one runs without the preflight
  const auto all = assign_ranks(nodes, 1, false, nullptr);
  // Group ranks follow the host names here.
  CHECK(all[2].group_rank == 2);
  std::vector<int> checked;
  for (const auto& p : all[2].preflight) checked.push_back(p.group_rank);
  CHECK(checked == std::vector<int>{0, 1});  // rank 3 made no offer
  CHECK(all[2].preflight[0].offer == offer(40000));
  CHECK(all[2].preflight[0].addr == nodes[0].addr);
  CHECK(all[3].preflight.empty());

  Assignment back = std::get<Assignment>(decode_server_message(encode(ServerMessage{all[2]})));
  REQUIRE(back.preflight.size() == 2);
  CHECK(back.preflight[1].host == "node1");
  CHECK(back.preflight[1].offer == offer(40001));

  Assignment many = all[2];
  many.preflight.resize(kMaxPreflightPeers + 1, many.preflight[0]);
  CHECK_THROWS_WITH(decode_server_message(encode(ServerMessage{many})),
                    Catch::Contains("\"preflight\""));
}

TEST_CASE("group rank 0 learns how many nodes will check MASTER_PORT", "[preflight]") {
  std::vector<NodeDescriptor> nodes;
  for (int i = 0; i < 5; ++i) {
    nodes.push_back(node("node" + std::to_string(i), 40000 + i));
    nodes.back().preflight->master_check = true;
  }
  nodes[3].preflight.reset();                // runs without the preflight
  nodes[4].preflight->master_check = false;  // an older trainrun
  auto all = assign_ranks(nodes, 1, false, nullptr);
  CHECK(all[0].group_rank == 0);
  CHECK(all[0].master_port_checks == 2);  // node1 and node2
  for (int g = 1; g < 5; ++g) CHECK(all[g].master_port_checks == 0);

  Assignment back = std::get<Assignment>(decode_server_message(encode(ServerMessage{all[0]})));
  CHECK(back.master_port_checks == 2);
  CHECK(back.preflight[0].offer.master_check);
  CHECK_FALSE(back.preflight[1].offer.master_check);  // node4, its ring neighbour
  // An older server sends no count: group rank 0 waits for nobody.
  std::string older = encode(ServerMessage{all[0]});
  older.replace(older.find(",\"master_port_checks\":2"), 23, "");
  CHECK(std::get<Assignment>(decode_server_message(older)).master_port_checks == 0);
  std::string bad = encode(ServerMessage{all[0]});
  bad.replace(bad.find("\"master_port_checks\":2"), 22, "\"master_port_checks\":5");
  CHECK_THROWS_WITH(decode_server_message(bad), Catch::Contains("\"master_port_checks\""));

  // An older agent's offer has no flag: it neither checks MASTER_PORT nor opens it.
  Join j{nodes[0]};
  std::string join = encode(ClientMessage{j});
  join.replace(join.find(",\"master_check\":true"), 20, "");
  CHECK_FALSE(std::get<Join>(decode_client_message(join)).node.preflight->master_check);

  // Group rank 0 of an older trainrun: nobody checks its MASTER_PORT.
  nodes[0].preflight->master_check = false;
  CHECK(assign_ranks(nodes, 1, false, nullptr)[0].master_port_checks == 0);
}

TEST_CASE("group rank 0 learns every address the round's nodes are known by", "[rendezvous]") {
  NodeDescriptor a{"a", "10.0.0.1", 1, 1, -1, 29500};
  a.seen_addr = "10.0.0.1";  // advertised and seen alike: once
  NodeDescriptor b{"b", "::ffff:10.0.0.2", 2, 1, -1, 29500};
  b.seen_addr = "192.168.0.2";  // reached the server by another route
  NodeDescriptor c{"c", "node-c", 3, 1, -1, 29500};
  c.seen_addr = "fd00::3";                           // a host name: the seen address stands for it
  NodeDescriptor d{"d", "node-d", 4, 1, -1, 29500};  // etcd: nothing seen, the name alone
  CHECK(node_addresses({&a, &b, &c, &d}) ==
        std::vector<std::string>{"10.0.0.1", "10.0.0.2", "192.168.0.2", "fd00::3", "node-d"});

  const auto all = assign_ranks({b, a}, 1, false, nullptr);
  const Assignment& zero = all[0].group_rank == 0 ? all[0] : all[1];
  const Assignment& one = all[0].group_rank == 0 ? all[1] : all[0];
  CHECK(zero.node_addresses.size() == 3);
  CHECK(one.node_addresses.empty());
}

TEST_CASE("the etcd state keeps each member's offer", "[preflight]") {
  EtcdRoundState s;
  EtcdMember m;
  m.id = "a";
  m.node = node("node1", 40001);
  s.waiting.push_back(m);
  const EtcdRoundState back = decode_state(encode_state(s));
  REQUIRE(back.waiting.size() == 1);
  REQUIRE(back.waiting[0].node.preflight);
  CHECK(*back.waiting[0].node.preflight == offer(40001));
}
