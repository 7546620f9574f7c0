// The etcd backend's keys (EtcdKeyspace): their names, the ranges read and watched, and what a
// range response or a watch event of etcd's JSON gateway says of them.
#include "etcd_keys.hpp"

#include <catch2/catch.hpp>

#include "etcd_client.hpp"

using namespace trainrun::rendezvous;
using json = nlohmann::json;

namespace {

json kv(const std::string& key, const std::string& value, int mod_revision) {
  return {{"key", base64_encode(key)},
          {"value", base64_encode(value)},
          {"mod_revision", std::to_string(mod_revision)}};
}

}  // namespace

TEST_CASE("etcd keys: the ranges of a run, and of its node keys and state", "[etcd]") {
  const EtcdKeyspace space("/trainrun/a/");
  CHECK(base64_decode(space.everything().at("range_end")) == "/trainrun/a0");
  CHECK(base64_decode(space.nodes_and_state().at("key")) == "/trainrun/a/nodes/");
  CHECK(base64_decode(space.nodes_and_state().at("range_end")) ==
        std::string("/trainrun/a/state\0", 18));
  // The agents that do not write watch the node keys and the state's summary, not the state.
  CHECK(base64_decode(space.nodes_and_round().at("range_end")) ==
        std::string("/trainrun/a/round\0", 18));
  CHECK(space.round() < space.state());
}

TEST_CASE("etcd keys: a range response read as the state and the keys beside it", "[etcd]") {
  const EtcdKeyspace space("/trainrun/a/");
  EtcdRoundState state;
  state.generation = 3;
  NodeDescriptor node;
  node.host = "h";
  node.addr = "10.0.0.1";
  const json response = {
      {"header", {{"revision", "42"}}},
      {"kvs",
       {kv("/trainrun/a/state", encode_state(state), 40), kv("/trainrun/a/nodes/n1", "h pid 1", 5),
        kv("/trainrun/a/joins/n1", encode_join(EtcdJoin{3, 2, node, 0}), 41),
        kv("/trainrun/a/answers/n1", "7", 9), kv("/trainrun/a/answers/n2", "not a round", 9),
        kv("/trainrun/a/done/n1", encode_done(EtcdDone{3, 7}), 10),
        kv("/trainrun/a/ended/n1", "not a message", 11), kv("/trainrun/a/other", "x", 12)}}};
  const EtcdSnapshot s = space.snapshot(response);
  CHECK(s.revision == 42);
  REQUIRE(s.state);
  CHECK(s.state->generation == 3);
  CHECK(s.state_mod_revision == 40);
  CHECK(s.keys.live == std::set<std::string>{"n1"});
  REQUIRE(s.keys.joins.count("n1"));
  CHECK(s.keys.joins.at("n1").seq == 2);
  CHECK(s.keys.joins.at("n1").revision == 41);  // the order joins are taken in
  CHECK(s.keys.joins.at("n1").node.addr == "10.0.0.1");
  CHECK(s.keys.answers == std::map<std::string, std::uint64_t>{{"n1", 7}});
  CHECK(s.keys.done.at("n1").round == 7);
  CHECK(s.keys.ended.empty());  // a value that is not one is no key
  // A watch event deletes what a put noted.
  EtcdKeys keys = s.keys;
  space.note(keys, "/trainrun/a/nodes/n1", nullptr);
  space.note(keys, "/trainrun/a/joins/n1", nullptr);
  CHECK(keys.live.empty());
  CHECK(keys.joins.empty());
  // No state stored yet: revision 0, as the compare-and-set that creates it says.
  const EtcdSnapshot empty = space.snapshot(json{{"header", {{"revision", "5"}}}});
  CHECK_FALSE(empty.state);
  CHECK(empty.state_mod_revision == 0);
  // A state this version did not write is refused.
  CHECK_THROWS_AS(space.snapshot(json{{"header", {{"revision", "5"}}},
                                      {"kvs", {kv("/trainrun/a/state", "{}", 4)}}}),
                  ProtocolError);
}

TEST_CASE("etcd keys: the gateway's int64 fields, strings or numbers", "[etcd]") {
  CHECK(etcd_int(json{{"ID", "7587"}}, "ID") == 7587);
  CHECK(etcd_int(json{{"TTL", 5}}, "TTL") == 5);
  CHECK(etcd_int(json::object(), "TTL") == 0);  // the gateway leaves out zeros
  CHECK_THROWS(etcd_int(json{{"ID", "x"}}, "ID"));
}
