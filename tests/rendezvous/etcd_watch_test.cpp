// An etcd agent's view of its run's keys against a real etcd: read, then watched.
#include "etcd_watch.hpp"

#include <catch2/catch.hpp>

#include "etcd_rig.hpp"

using namespace trainrun::rendezvous;

namespace {

struct Seen {
  std::vector<std::pair<EtcdRoundState, std::int64_t>> states;
  bool node_gone = false;
  int watching = 0;
};

EtcdWatch watch_of(trainrun::test::EtcdRig& rig, const std::string& node_id, Seen& seen) {
  return EtcdWatch(
      rig.io, rig.calls, rig.space, rig.round, node_id, rig.server.endpoint(),
      EtcdWatch::Hooks{[&rig] { return rig.stopped.has_value(); },
                       [&rig](Stop s) { rig.stopped = s; },
                       [&seen](const EtcdRoundState& s, std::int64_t revision) {
                         seen.states.emplace_back(s, revision);
                       },
                       [](const std::string&, std::int64_t) {},
                       [&seen](bool node_gone) { seen.node_gone = seen.node_gone || node_gone; },
                       [] { FAIL("the watch ended"); }});
}

}  // namespace

TEST_CASE("etcd watch: a state another agent writes and a node gone reach the lowest agent",
          "[etcd]") {
  ETCD_RIG(rig);
  const std::int64_t b_lease = rig.grant_lease();
  rig.put(rig.space.nodes() + "a", "agent a", rig.grant_lease());
  rig.put(rig.space.nodes() + "b", "agent b", b_lease);
  Seen seen;
  EtcdWatch watch = watch_of(rig, "a", seen);
  bool read = false;
  watch.read([&](const EtcdSnapshot& s) {
    read = true;
    watch.watch(s.revision + 1);
  });
  REQUIRE(rig.run_until([&] { return read; }));
  CHECK(watch.view().generation == std::uint64_t{0});
  CHECK(watch.writing());  // "a" is the lowest live node: it watches every key

  EtcdRoundState s;
  s.restart_count = 3;
  rig.put(rig.space.state(), encode_state(s));
  REQUIRE(rig.run_until([&] { return !seen.states.empty(); }));
  CHECK(seen.states.back().first.restart_count == 3);
  CHECK(watch.view().stored_mod_revision == seen.states.back().second);
  CHECK(etcd_int(rig.get(rig.space.state()), "mod_revision") == seen.states.back().second);

  rig.post("/v3/lease/revoke", {{"ID", std::to_string(b_lease)}});
  REQUIRE(rig.run_until([&] { return seen.node_gone; }));
  CHECK(watch.view().keys.live == std::set<std::string>{"a"});
  CHECK_FALSE(rig.stopped);
}

TEST_CASE("etcd watch: a state this trainrun did not write stops the job on this node", "[etcd]") {
  ETCD_RIG(rig);
  // Another version's layout, or no state at all: the launcher's hint differs (by the kind).
  const auto row =
      GENERATE(std::pair<std::string, Refusal>{"{\"layout\": 1}", Refusal::state_version},
               std::pair<std::string, Refusal>{"not json", Refusal::foreign_state});
  const auto& [value, kind] = row;
  rig.put(rig.space.state(), value);
  Seen seen;
  EtcdWatch watch = watch_of(rig, "a", seen);
  bool read = false;
  watch.read([&](const EtcdSnapshot&) { read = true; });
  REQUIRE(rig.run_until([&] { return rig.stopped.has_value(); }));
  CHECK_FALSE(read);
  CHECK(rig.stopped->cause == StopCause::rejected);
  CHECK(rig.stopped->refusal == kind);
  CHECK_THAT(rig.stopped->reason, Catch::Contains("is not one this trainrun wrote"));
  CHECK_THAT(rig.stopped->reason, !Catch::Contains("--rdzv-id"));
}
