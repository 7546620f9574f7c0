// What the states and summaries an etcd agent sees mean for its node, without etcd.
#include "etcd_membership.hpp"

#include <catch2/catch.hpp>

#include "etcd_client.hpp"
#include "sample_offer.hpp"
#include "test_node.hpp"

using namespace trainrun::rendezvous;
using Phase = EtcdRoundState::Phase;

namespace {

RoundOptions two_nodes() {
  RoundOptions o;
  o.min_nodes = o.max_nodes = 2;
  return o;
}

// `host`'s join, with a preflight offer where `preflight`.
NodeDescriptor joining(const std::string& host, bool preflight) {
  NodeDescriptor n = node(host);
  if (preflight) n.preflight = trainrun::testing::sample_offer();
  return n;
}

// Node `me` ("a": group rank 0, "b": 1) of a job of two, its join written and taken into the
// state; with `preflight`, both nodes' joins carry an offer.
struct Node {
  explicit Node(bool preflight = false, std::string who = "a") : me(std::move(who)) {
    view.generation = 0;
    events.on_assignment = [this](const Assignment& a) { assignment = a; };
    member.join(joining(me, preflight));
    member.take_join();
    s.joins_taken = {{"a", 1}, {"b", 1}};
    REQUIRE(round.join(s, "a", joining("a", preflight), 100));
    REQUIRE(round.join(s, "b", joining("b", preflight), 101));
    REQUIRE(s.phase == Phase::running);
    REQUIRE(s.participants.size() == 2);
  }

  std::string me;
  RoundOptions options = two_nodes();
  EtcdRound round{options, "etcd:2379", 15};
  EtcdView view;
  ClientEvents events;
  std::optional<Assignment> assignment;
  std::optional<std::uint64_t> answered;
  std::optional<Stop> stopped;
  int state_reads = 0;
  EtcdMembership member{
      round,
      options,
      view,
      me,
      "etcd:2379",
      events,
      EtcdMembership::Hooks{[this] { return stopped.has_value(); }, [this](Stop s) { stopped = s; },
                            [this](std::uint64_t r) { answered = r; },
                            [this](std::int64_t) { ++state_reads; },
                            [](const std::optional<double>&) {}, [](const std::string&) {}}};
  EtcdRoundState s;
};

}  // namespace

TEST_CASE("etcd membership: a node answers the round formed with it, then takes its place",
          "[etcd]") {
  Node n;
  n.member.react(n.s, 10);
  REQUIRE(n.answered == n.s.round);
  CHECK_FALSE(n.assignment);  // no worker starts before every member has answered

  REQUIRE(n.round.start(n.s, {{"a", n.s.round}, {"b", n.s.round}}));
  n.member.react(n.s, 11);
  REQUIRE(n.assignment);
  CHECK(n.assignment->group_rank == n.round.assignments(n.s)[0].group_rank);
  CHECK(n.member.assigned() == n.s.round);
  CHECK_FALSE(n.stopped);
}

TEST_CASE("etcd membership: a summary of the round started with this node assigns it unread",
          "[etcd]") {
  Node n(false, "b");
  n.member.react(n.s, 10);
  const EtcdRoundState before = n.s;
  REQUIRE(n.round.start(n.s, {{"a", n.s.round}, {"b", n.s.round}}));
  n.member.take_summary(base64_encode(encode_summary(n.round.summary(before, n.s))), 11);
  REQUIRE(n.assignment);
  CHECK(n.assignment->group_world_size == 2);
  CHECK(n.state_reads == 0);
  CHECK(n.member.seen_revision() == 11);
}

namespace {

// A round of nodes a and b starts; its summary does not carry all the node needs, so the
// assignment comes from one read of the state after it.
void take_started_round_from_the_state(Node& n) {
  n.member.react(n.s, 10);
  const EtcdRoundState before = n.s;
  REQUIRE(n.round.start(n.s, {{"a", n.s.round}, {"b", n.s.round}}));
  n.member.take_summary(base64_encode(encode_summary(n.round.summary(before, n.s))), 11);
  CHECK_FALSE(n.assignment);
  CHECK(n.state_reads == 1);
  n.member.react(n.s, 11);
  REQUIRE(n.assignment);
}

}  // namespace

TEST_CASE("etcd membership: group rank 0 takes the started round from the state", "[etcd]") {
  // The summary has no node addresses: assigned from it, the job's store would admit nobody.
  Node n;
  take_started_round_from_the_state(n);
  CHECK(n.assignment->group_rank == 0);
  CHECK(n.assignment->node_addresses == std::vector<std::string>{"10.0.0.1"});
}

TEST_CASE("etcd membership: a node that runs the preflight takes the started round from the state",
          "[etcd]") {
  // The summary has no offers: assigned from it, the node would start its workers unchecked.
  Node n(true);
  take_started_round_from_the_state(n);
  REQUIRE(n.assignment->preflight.size() == 1);
  CHECK(n.assignment->preflight[0].host == "b");
  CHECK(n.assignment->preflight[0].offer == trainrun::testing::sample_offer());
}

TEST_CASE("etcd membership: a join refused stops the node with the reason", "[etcd]") {
  Node n;
  n.s.refused["a"] = Reject{"the job is full", Refusal::none};
  n.s.participants.erase(n.s.participants.begin());
  n.member.react(n.s, 10);
  REQUIRE(n.stopped);
  CHECK(n.stopped->cause == StopCause::rejected);
  CHECK_THAT(n.stopped->reason, Catch::Contains("dropped this node: the job is full"));
}
