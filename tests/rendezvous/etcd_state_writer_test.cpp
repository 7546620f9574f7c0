// The etcd backend's writer of the round state against a real etcd: read, apply, compare-and-set,
// again after a conflict.
#include "etcd_state_writer.hpp"

#include <catch2/catch.hpp>

#include "etcd_rig.hpp"

using namespace trainrun::rendezvous;

namespace {

// An agent's writer over the rig's etcd: it always reads before it writes (no watch).
struct Writer {
  Writer(trainrun::test::EtcdRig& rig, EtcdCalls& calls)
      : writer(calls, rig.space, rig.round,
               EtcdStateWriter::Hooks{
                   [] { return true; }, [] { return std::uint64_t{0}; },
                   [] { return std::optional<EtcdSnapshot>(); },
                   [&rig, &calls](std::function<void(const EtcdSnapshot&)> then) {
                     calls.call(
                         "/v3/kv/range", rig.space.everything(),
                         [&rig, then](const nlohmann::json& j) { then(rig.space.snapshot(j)); },
                         [] { FAIL("etcd unreachable"); });
                   },
                   [this](const EtcdRoundState&, std::int64_t) { ++wrote; },
                   [this](const EtcdRoundState& s, std::int64_t revision) {
                     ++changes;
                     last = s;
                     last_revision = revision;
                   },
                   [](Stop s) { FAIL(s.reason); }}) {}
  EtcdStateWriter writer;
  int wrote = 0;
  int changes = 0;
  EtcdRoundState last;
  std::int64_t last_revision = 0;
};

bool count_restart(EtcdRoundState& s, double) {
  ++s.restart_count;
  return true;
}

}  // namespace

TEST_CASE("etcd state writer: agents changing the state at once lose no change", "[etcd]") {
  ETCD_RIG(rig);
  // A second agent: its own requests to the same etcd.
  EtcdCalls other_calls{
      rig.io, rig.server.endpoint(), rig.options,
      EtcdCalls::Hooks{[] { return false; }, [](Stop s) { FAIL(s.reason); }, [](auto&) {}}};
  other_calls.connect(rig.server.url());
  Writer a(rig, rig.calls), b(rig, other_calls);
  for (int i = 0; i < 5; ++i) {
    a.writer.enqueue(count_restart);
    b.writer.enqueue(count_restart);
  }
  REQUIRE(rig.run_until([&] { return a.changes == 5 && b.changes == 5; }));
  CHECK(a.wrote + b.wrote == 10);
  const EtcdSnapshot stored = rig.read();
  REQUIRE(stored.state);
  CHECK(stored.state->restart_count == 10);
  // The summary is written with the state, in the same transaction.
  const nlohmann::json summary = rig.get(rig.space.round());
  REQUIRE(summary.is_object());
  CHECK(etcd_int(summary, "mod_revision") == stored.state_mod_revision);

  // A change that changes nothing writes nothing: the state as read is the state.
  a.writer.enqueue([](EtcdRoundState&, double) { return false; });
  REQUIRE(rig.run_until([&] { return a.changes == 6; }));
  CHECK(a.wrote == a.changes - 1);
  CHECK(a.last_revision == stored.state_mod_revision);
  CHECK(rig.read().state_mod_revision == stored.state_mod_revision);
}
