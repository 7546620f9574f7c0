// The keys an etcd agent writes for itself, on its lease, against a real etcd.
#include "etcd_own_keys.hpp"

#include <catch2/catch.hpp>

#include "etcd_rig.hpp"

using namespace trainrun::rendezvous;

namespace {

// One agent: its lease, what it knows of its node, its own keys.
struct Agent {
  Agent(trainrun::test::EtcdRig& rig, const std::string& id)
      : rig(rig),
        id(id),
        lease(
            rig.io, rig.options.liveness,
            [&rig](const std::string& path, const nlohmann::json& body,
                   std::function<void(const nlohmann::json&)> ok,
                   std::function<void()> retry) { rig.calls.call(path, body, ok, retry); },
            [] { FAIL("the lease expired"); }),
        member(
            rig.round, rig.options.round, view, id, rig.server.endpoint(), events,
            EtcdMembership::Hooks{[] { return false; }, [](Stop s) { FAIL(s.reason); },
                                  [](std::uint64_t) {}, [](std::int64_t) {},
                                  [](const std::optional<double>&) {}, [](const std::string&) {}}),
        own(rig.calls, rig.space, lease, member, id,
            EtcdOwnKeys::Hooks{[](NodeDescriptor node) {
                                 if (node.addr.empty()) node.addr = "10.0.0.9";
                                 return node;
                               },
                               [this] { ++written; }}) {
    bool granted = false;
    lease.grant([&] { granted = true; });
    REQUIRE(rig.run_until([&] { return granted; }));
  }

  // First contact; whether the join went in with it.
  bool first_contact() {
    std::optional<bool> joined;
    own.first_contact([&](const nlohmann::json& range, bool j) {
      CHECK(range.contains("header"));
      joined = j;
    });
    REQUIRE(rig.run_until([&] { return joined.has_value(); }));
    return *joined;
  }
  // The key's lease, or 0 where the key is not there.
  std::int64_t lease_of(const std::string& dir) {
    const nlohmann::json kv = rig.get(dir + id);
    return kv.is_object() ? etcd_int(kv, "lease") : 0;
  }

  trainrun::test::EtcdRig& rig;
  std::string id;
  EtcdView view;
  ClientEvents events;
  EtcdLease lease;
  EtcdMembership member;
  EtcdOwnKeys own;
  int written = 0;
};

NodeDescriptor node() {
  NodeDescriptor n;
  n.host = "a";
  n.nproc = 2;
  n.master_port = 29500;
  return n;
}

}  // namespace

TEST_CASE("etcd own keys: the first agent's join goes in with its node key, on its lease",
          "[etcd]") {
  ETCD_RIG(rig);
  Agent a(rig, "a");
  a.member.join(node());
  CHECK(a.first_contact());
  CHECK_FALSE(a.member.pending_join());
  CHECK(a.lease_of(rig.space.nodes()) == *a.lease.id());
  CHECK(a.lease_of(rig.space.joins()) == *a.lease.id());
  const nlohmann::json kv = rig.get(rig.space.joins() + "a");
  const auto join = decode_join(base64_decode(kv.at("value").get<std::string>()), 0);
  REQUIRE(join);
  CHECK(join->node.addr == "10.0.0.9");  // no address given: the one the agent is reached at
  CHECK(join->node.nproc == 2);
}

TEST_CASE("etcd own keys: once a state is stored, a join is a put of its own", "[etcd]") {
  ETCD_RIG(rig);
  rig.put(rig.space.state(), encode_state(EtcdRoundState{}));
  Agent b(rig, "b");
  b.member.join(node());
  CHECK_FALSE(b.first_contact());
  CHECK(b.member.pending_join());  // still to be written, for the job the state names
  CHECK(b.lease_of(rig.space.nodes()) == *b.lease.id());
  CHECK(b.lease_of(rig.space.joins()) == 0);

  b.own.join(0);
  REQUIRE(rig.run_until([&] { return b.written == 1; }));
  CHECK(b.lease_of(rig.space.joins()) == *b.lease.id());
  b.own.put(rig.space.done(), encode_done(EtcdDone{0, 0}));
  REQUIRE(rig.run_until([&] { return b.written == 2; }));
  CHECK(b.lease_of(rig.space.done()) == *b.lease.id());
}
