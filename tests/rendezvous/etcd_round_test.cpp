// The etcd backend's round rules (EtcdRound), without etcd: the state value as etcd would hold
// it, changed in turn as agents would change it.
#include "trainrun/rendezvous/etcd_round.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "worker_failure.hpp"

using namespace trainrun::rendezvous;
using Phase = EtcdRoundState::Phase;

namespace {

NodeDescriptor node(const std::string& host, int nproc = 1) {
  NodeDescriptor n;
  n.host = host;
  n.addr = "10.0.0.1";
  n.pid = 1;
  n.nproc = nproc;
  n.master_port = 29500;
  return n;
}

RoundOptions options(int min, int max, int restarts) {
  RoundOptions o;
  o.min_nodes = min;
  o.max_nodes = max;
  o.max_restarts = restarts;
  o.last_call_timeout = std::chrono::seconds(5);
  o.join_timeout = std::chrono::seconds(60);
  return o;
}

// Each change goes through the value etcd stores, as between agents.
EtcdRoundState stored(const EtcdRoundState& s) { return decode_state(encode_state(s)); }

// Every participant takes its place, as each agent does once it sees the round formed.
void answer_all(const EtcdRound& round, EtcdRoundState& s) {
  std::map<std::string, std::uint64_t> answers;
  for (const auto& m : s.participants) answers[m.id] = s.round;
  REQUIRE(round.start(s, answers));
}

}  // namespace

TEST_CASE("etcd round: a fixed-size job forms when every node has joined", "[etcd]") {
  EtcdRound round(options(2, 2, 0), "etcd:2379", 15);
  EtcdRoundState s;
  CHECK(round.join(s, "a", node("a", 2), 100));
  s = stored(s);
  CHECK(s.phase == Phase::forming);
  CHECK(round.join(s, "b", node("b", 3), 101));
  s = stored(s);
  REQUIRE(s.phase == Phase::running);
  CHECK(s.participants.size() == 2);
  CHECK(s.participant("b")->node.nproc == 3);
  CHECK_FALSE(s.started);  // no worker starts before every member has answered
  CHECK_FALSE(round.start(s, {{"a", 0}}));
  CHECK_FALSE(round.start(s, {{"a", 0}, {"b", 7}}));  // b's answer is for another round
  CHECK(round.start(s, {{"a", 0}, {"b", 0}}));
  CHECK(stored(s).started);
  CHECK_FALSE(round.start(s, {{"a", 0}, {"b", 0}}));
  CHECK_FALSE(round.join(s, "a", node("a", 2), 102));  // a participant's repeated join: nothing
  CHECK(round.done(s, "a", 0));
  CHECK(round.done(s, "b", 0));
  REQUIRE(s.stop);
  CHECK(s.stop->cause == StopCause::finished);
}

TEST_CASE("etcd round: an elastic job forms at min after the last call, and grows", "[etcd]") {
  EtcdRound round(options(1, 3, 2), "etcd:2379", 15);
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  CHECK(s.phase == Phase::forming);
  REQUIRE(round.next_deadline(s) == Approx(105));
  CHECK_FALSE(round.tick(s, 104));
  CHECK(round.tick(s, 105));
  CHECK(s.phase == Phase::running);
  answer_all(round, s);
  CHECK(round.join(s, "b", node("b"), 110));  // scale up: a new round with both
  CHECK(s.round == 1);
  CHECK(s.restart->cause == RestartCause::scale_up);
  CHECK(s.restart_count == 0);
  CHECK(s.phase == Phase::forming);
  round.join(s, "a", node("a"), 111);  // every survivor back: no last call
  CHECK(s.phase == Phase::running);
  CHECK(s.participants.size() == 2);
}

TEST_CASE("etcd round: a node whose key is gone is lost, and the job shrinks or stops",
          "[etcd]") {
  EtcdRound round(options(2, 3, 1), "etcd:2379", 3);
  EtcdRoundState s;
  for (const char* id : {"a", "b", "c"}) round.join(s, id, node(id), 100);
  REQUIRE(s.phase == Phase::running);
  answer_all(round, s);
  CHECK_FALSE(round.prune(s, {"a", "b", "c"}, 101));
  CHECK(round.prune(s, {"b", "c"}, 102));  // a's lease expired
  CHECK(s.phase == Phase::forming);
  CHECK(s.restart_count == 1);
  CHECK_THAT(s.restart->reason, Catch::Contains("etcd lease expired"));
  round.join(s, "b", node("b"), 103);
  round.join(s, "c", node("c"), 103);
  REQUIRE(s.phase == Phase::running);
  answer_all(round, s);
  CHECK(round.prune(s, {"c"}, 104));  // no restarts left
  REQUIRE(s.stop);
  CHECK(s.stop->cause == StopCause::node_lost);
  CHECK_THAT(s.stop->reason, Catch::Contains("no restarts left"));
}

TEST_CASE("etcd round: a failure restarts every node until the job's restarts are used",
          "[etcd]") {
  EtcdRound round(options(2, 2, 1), "etcd:2379", 15);
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  round.join(s, "b", node("b"), 100);
  FailureReport f{"b", 1, 0, 5, ""};
  CHECK_FALSE(round.failure(s, "b", Failure{7, f}, 101));  // another round's report
  CHECK(round.failure(s, "b", Failure{0, f}, 101));
  CHECK(s.restart_count == 1);
  round.join(s, "a", node("a"), 102);
  round.join(s, "b", node("b"), 102);
  CHECK(round.failure(s, "a", Failure{1, f}, 103));
  CHECK(s.phase == Phase::concluding);  // no restart left: every member says what failed
  CHECK(round.conclude(s, {{"a", Ended{1, {}, 0}}, {"b", Ended{1, {}, 0}}}, 104));
  REQUIRE(s.stop);
  CHECK(s.stop->exit_code == 5);
  CHECK(stored(s).stop->reason == s.stop->reason);
}

namespace {

// A running two-node job ("a", "b") whose node a reports rank 0's failure (exit 3, its error file
// dated 200) at time 110, with no restart left.
EtcdRoundState failed_on_a(const EtcdRound& round) {
  EtcdRoundState s;
  for (const char* id : {"a", "b"}) round.join(s, id, node(id), 100);
  answer_all(round, s);
  REQUIRE(round.failure(
      s, "a", Failure{0, FailureReport{"a", 0, 0, 3, ""}, {worker_failure("a", 0, 3, 200)}, 0},
      110));
  return stored(s);
}

}  // namespace

TEST_CASE("etcd round: a failure with no restart left concludes when every member has said",
          "[etcd]") {
  EtcdRound round(options(3, 3, 0), "etcd:2379", 15);
  EtcdRoundState s;
  for (const char* id : {"a", "b", "c"}) round.join(s, id, node(id), 100);
  answer_all(round, s);
  CHECK(round.done(s, "c", 0));  // at the exit barrier: nothing to add, not waited for
  REQUIRE(round.failure(
      s, "a", Failure{0, FailureReport{"a", 0, 0, 3, ""}, {worker_failure("a", 0, 3, 200)}, 0},
      110));
  s = stored(s);
  REQUIRE(s.phase == Phase::concluding);
  CHECK(s.awaiting == std::set<std::string>{"a", "b"});
  CHECK_FALSE(s.stop);
  CHECK(round.generation_to_join(s) == s.generation);  // not over: a late agent waits in it
  CHECK(round.join(s, "d", node("d"), 111));
  CHECK(s.phase == Phase::concluding);  // and takes nobody in
  // b's worker failed second, stopped by the halt, but its error file is dated earlier.
  const Ended b{0, {worker_failure("b", 1, 4, 100)}, 2};
  CHECK_FALSE(round.conclude(s, {{"b", b}}, 112));                          // a has not said
  CHECK_FALSE(round.conclude(s, {{"a", Ended{7, {}, 0}}, {"b", b}}, 112));  // another round's
  CHECK(round.conclude(s, {{"a", Ended{0, {}, 0}}, {"b", b}}, 113));
  s = stored(s);
  REQUIRE(s.phase == Phase::ended);
  REQUIRE(s.stop);
  CHECK(s.stop->cause == StopCause::worker_failed);
  CHECK(s.stop->exit_code == 4);
  CHECK(s.stop->failure->rank == 1);
  REQUIRE(s.stop->failures.size() == 2);
  CHECK(s.stop->failures[0].rank == 1);
  CHECK(s.stop->failures[1].rank == 0);  // a's report, kept in the state, though a said nothing
  CHECK(s.stop->not_relayed == 2);
  CHECK_THAT(s.stop->reason, Catch::Contains("rank 1") && Catch::Contains("of 4 failures"));
  CHECK(s.awaiting.empty());
  CHECK(s.reports.empty());
  CHECK(round.generation_to_join(s) == s.generation + 1);  // the next job starts afresh
}

TEST_CASE("etcd round: a member lost while concluding is not waited for, its word still counts",
          "[etcd]") {
  EtcdRound round(options(2, 2, 0), "etcd:2379", 15);
  EtcdRoundState s = failed_on_a(round);
  CHECK(round.prune(s, {"b"}, 111));  // a's lease expired before it said more
  REQUIRE(s.phase == Phase::concluding);
  CHECK(s.awaiting == std::set<std::string>{"b"});
  CHECK_FALSE(s.participant("a"));
  CHECK(round.conclude(s, {{"b", Ended{0, {}, 0}}}, 112));
  REQUIRE(s.stop);
  CHECK(s.stop->exit_code == 3);
  REQUIRE(s.stop->failures.size() == 1);
  CHECK(s.stop->failures[0].host == "a");

  // Every awaited member lost: nobody is left to wait for.
  EtcdRoundState t = failed_on_a(round);
  CHECK(round.lost(t, "b", "left: b stopped by SIGTERM", 111));
  CHECK(round.prune(t, {}, 111));
  CHECK(round.conclude(t, {}, 111));
  REQUIRE(t.stop);
  CHECK(t.stop->exit_code == 3);
}

TEST_CASE("etcd round: a member silent past the join timeout is not waited for", "[etcd]") {
  EtcdRound round(options(2, 2, 0), "etcd:2379", 15);
  EtcdRoundState s = failed_on_a(round);
  REQUIRE(round.next_deadline(s) == Approx(170));  // the failure at 110, the join timeout 60 s
  CHECK_FALSE(round.tick(s, 170));                 // conclude() decides, with the answers read
  CHECK_FALSE(round.conclude(s, {{"a", Ended{0, {}, 0}}}, 169));
  CHECK(round.conclude(s, {{"a", Ended{0, {}, 0}}}, 170));
  REQUIRE(s.stop);
  CHECK(s.stop->exit_code == 3);
  CHECK_FALSE(round.next_deadline(s));
}

TEST_CASE("etcd round: a state this version did not write is refused", "[etcd]") {
  CHECK_THROWS_AS(decode_state("{}"), ProtocolError);
  CHECK_THROWS_AS(decode_state("not json"), ProtocolError);
}

TEST_CASE("etcd round: a member lost before every member answered is left out, no restart counted",
          "[etcd]") {
  // "x" was SIGKILLed while it waited: its lease outlives it, so the next agents pick it.
  EtcdRound round(options(2, 2, 0), "etcd:2379", 3);
  EtcdRoundState s;
  round.join(s, "x", node("x"), 100);
  round.join(s, "a", node("a"), 101);
  round.join(s, "b", node("b"), 101);  // the job is full: b waits
  REQUIRE(s.phase == Phase::running);
  CHECK_FALSE(round.start(s, {{"a", 0}}));  // x never answers
  CHECK(round.prune(s, {"a", "b"}, 103));   // x's lease expired
  s = stored(s);
  REQUIRE(s.phase == Phase::running);  // formed again at once, with the one waiting
  CHECK(s.round == 1);
  CHECK(s.restart_count == 0);
  CHECK_FALSE(s.stop);
  CHECK_FALSE(s.participant("x"));
  CHECK(s.participant("a"));
  CHECK(s.participant("b"));
  CHECK_THAT(s.restart->reason, Catch::Contains("never answered"));
  CHECK_FALSE(round.start(s, {{"a", 0}, {"b", 0}}));  // answers for the round that never started
  CHECK_FALSE(s.started);
  answer_all(round, s);
  CHECK(round.done(s, "a", 1));
  CHECK(round.done(s, "b", 1));
  CHECK(s.stop->cause == StopCause::finished);
}

TEST_CASE("etcd round: a newcomer before the round started joins it without a restart", "[etcd]") {
  EtcdRound round(options(1, 3, 0), "etcd:2379", 15);
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  round.tick(s, 105);  // the last call: a alone
  REQUIRE(s.phase == Phase::running);
  CHECK(round.join(s, "b", node("b"), 105.5));
  REQUIRE(s.phase == Phase::running);
  CHECK(s.participants.size() == 2);
  CHECK(s.restart_count == 0);
  CHECK(s.restart->cause == RestartCause::scale_up);
}

TEST_CASE("etcd round: a run id's next job starts afresh once the last one has ended", "[etcd]") {
  EtcdRound round(options(2, 2, 0), "etcd:2379", 15);
  CHECK(round.generation_to_join(std::nullopt) == 0);
  EtcdRoundState first;
  round.join(first, "a", node("a"), 100);
  CHECK(round.generation_to_join(first) == 0);  // forming: a late agent joins it, no wipe
  round.join(first, "b", node("b"), 100);
  answer_all(round, first);
  CHECK(round.generation_to_join(first) == 0);  // running: the same
  CHECK(round.state_of(first, 0)->participants.size() == 2);
  round.done(first, "a", 0);
  round.done(first, "b", 0);
  REQUIRE(first.phase == Phase::ended);
  const std::optional<EtcdRoundState> ended = stored(first);

  // Two agents of the next job read the ended state together; both belong to generation 1.
  const std::uint64_t g = round.generation_to_join(ended);
  REQUIRE(g == 1);
  CHECK(round.generation_to_join(EtcdRoundState{}) == 0);
  EtcdRoundState c = *round.state_of(ended, g);
  CHECK(c.generation == 1);
  CHECK_FALSE(c.stop);
  CHECK(round.join(c, "c", node("c"), 200));
  // d's compare-and-set lost to c's: it reads again and joins c's job, not a second one.
  const std::optional<EtcdRoundState> second = stored(c);
  EtcdRoundState d = *round.state_of(second, g);
  CHECK(round.join(d, "d", node("d"), 200));
  CHECK(d.generation == 1);
  CHECK(d.phase == Phase::running);
  CHECK(d.participants.size() == 2);
  // An agent of the first job that missed its end: its job is over.
  CHECK_FALSE(round.state_of(second, 0));
  CHECK(round.superseded().exit_code == 1);
}

TEST_CASE("etcd round: a state from before generations and answers reads as started", "[etcd]") {
  EtcdRound round(options(1, 1, 0), "etcd:2379", 15);
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  answer_all(round, s);
  auto j = nlohmann::json::parse(encode_state(s));
  j.erase("generation");
  j.erase("started");
  const EtcdRoundState old = decode_state(j.dump());
  CHECK(old.generation == 0);
  CHECK(old.started);
}
