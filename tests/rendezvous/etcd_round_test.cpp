// What the etcd backend adds to the round rules (EtcdRound), without etcd: answers before a round
// starts, generations, what stays out of the state, and its encoding. The rules themselves run
// against a real etcd in round_table_test.cpp.
#include "etcd_round.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_node.hpp"
#include "worker_failure.hpp"

using namespace trainrun::rendezvous;
using Phase = EtcdRoundState::Phase;

namespace {

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

TEST_CASE("etcd round: a formed round starts once every member has answered it", "[etcd]") {
  EtcdRound round(options(2, 2, 0), "etcd:2379", 15);
  EtcdRoundState s;
  CHECK(round.join(s, "a", node("a", 2), 100));
  CHECK(round.join(s, "b", node("b", 3), 101));
  s = stored(s);
  REQUIRE(s.phase == Phase::running);
  CHECK(s.participant("b")->node.nproc == 3);
  CHECK_FALSE(s.started);  // no worker starts before every member has answered
  CHECK_FALSE(round.start(s, {{"a", 0}}));
  CHECK_FALSE(round.start(s, {{"a", 0}, {"b", 7}}));  // b's answer is for another round
  CHECK(round.start(s, {{"a", 0}, {"b", 0}}));
  CHECK(stored(s).started);
  CHECK_FALSE(round.start(s, {{"a", 0}, {"b", 0}}));
  // A participant's join again is its own write landing twice: nothing, and no refusal.
  CHECK_FALSE(round.refusal(s, "a", node("a", 2)));
  CHECK_FALSE(round.join(s, "a", node("a", 2), 102));
}

TEST_CASE("etcd round: a concluding job keeps what members said in their own keys", "[etcd]") {
  EtcdRound round(options(2, 2, 0), "etcd:2379", 15);
  EtcdRoundState s;
  for (const char* id : {"a", "b"}) round.join(s, id, node(id), 100);
  answer_all(round, s);
  const WorkerFailure first = worker_failure("a", 0, 3, 200);
  REQUIRE(round.failure(s, "a", Failure{0, FailureReport{"a", 0, 0, 3, ""}, {first}, 0}, 110));
  s = stored(s);
  REQUIRE(s.phase == Phase::concluding);
  CHECK(round.generation_to_join(s) == s.generation);  // not over: a late agent waits in it
  // A second failure on b is not written into the state; b's ended key will carry it.
  CHECK_FALSE(round.failure(s, "b", Failure{0, FailureReport{"b", 1, 0, 4, ""}}, 111));
  const std::map<std::string, Ended> b_said{{"b", Ended{0, {worker_failure("b", 1, 4, 100)}, 0}}};
  CHECK_FALSE(round.conclude(s, b_said, 112));  // a has not said
  CHECK(s.awaiting == std::set<std::string>{"a", "b"});
  CHECK(s.reports.size() == 1);
  CHECK(round.conclude(s, {{"a", Ended{0, {first}, 0}}, {"b", b_said.at("b")}}, 113));
  s = stored(s);
  REQUIRE(s.stop);
  CHECK(s.stop->exit_code == 4);
  CHECK(s.stop->failures.size() == 2);
  CHECK(round.generation_to_join(s) == s.generation + 1);  // the next job starts afresh
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

TEST_CASE("etcd round: a state of the earlier layout is refused, saying so", "[etcd]") {
  EtcdRound round(options(1, 1, 0), "etcd:2379", 15);
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  auto j = nlohmann::json::parse(encode_state(s));
  j.erase("layout");
  j.erase("joins_taken");
  j.erase("refused");
  CHECK_THROWS_WITH(decode_state(j.dump()),
                    Catch::Contains("layout 1 was written by another version of trainrun"));
  // Typed, so that the launcher can add what to do; the library names none of its options.
  CHECK_THROWS_AS(decode_state(j.dump()), StateLayoutError);
  CHECK_THROWS_WITH(decode_state(j.dump()), !Catch::Contains("--"));
}

TEST_CASE("etcd round: a state of layout 2 is refused, saying so", "[etcd]") {
  EtcdRound round(options(1, 1, 0), "etcd:2379", 15);
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  auto j = nlohmann::json::parse(encode_state(s));
  j["layout"] = 2;
  CHECK_THROWS_WITH(decode_state(j.dump()),
                    Catch::Contains("layout 2 was written by another version of trainrun (this "
                                    "one reads layout 3)"));
}

TEST_CASE("etcd round: the summary beside the state says which changes concern a node", "[etcd]") {
  EtcdRound round(options(3, 3, 0), "etcd:2379", 15);
  const auto decoded = [](const EtcdRoundSummary& m) {
    std::optional<EtcdRoundSummary> d = decode_summary(encode_summary(m));
    REQUIRE(d);
    return *d;
  };
  EtcdRoundState s;
  round.join(s, "a", node("a"), 100);
  // What a knows: the state it read.
  const std::optional<EtcdRoundSummary> a_knows = round.summary(std::nullopt, stored(s));
  // b's join taken: a waiter like a, in the same phase: nothing for a to read.
  EtcdRoundState t = s;
  round.join(t, "b", node("b"), 101);
  EtcdRoundSummary m = decoded(round.summary(s, t));
  CHECK(m.waiting == 2);
  CHECK(m.deadline == round.next_deadline(t));
  CHECK(m.members.empty());
  CHECK_FALSE(concerns(m, a_knows, "a"));
  CHECK(concerns(m, std::nullopt, "a"));  // nothing known yet
  // b lost: b is no longer a member (its agent reads), a still waits.
  EtcdRoundState u = t;
  round.lost(u, "b", "gone", 102);
  m = decoded(round.summary(t, u));
  CHECK(m.left == std::set<std::string>{"b"});
  CHECK(concerns(m, a_knows, "b"));
  CHECK_FALSE(concerns(m, a_knows, "a"));
  // The round forms: it concerns every member, and names them.
  EtcdRoundState v = t;
  round.join(v, "c", node("c", 2), 103);
  REQUIRE(v.phase == Phase::running);
  m = decoded(round.summary(t, v));
  CHECK(concerns(m, a_knows, "a"));
  CHECK(m.members == std::vector<std::string>{"a", "b", "c"});
  CHECK(m.assignments.empty());
  // Started: each member's assignment, as from the state, but for group rank 0's node addresses
  // (that node reads the state).
  EtcdRoundState w = v;
  answer_all(round, w);
  m = decoded(round.summary(v, w));
  std::vector<Assignment> from_state = round.assignments(w);
  REQUIRE(m.assignments.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(from_state[i].node_addresses.empty() == (from_state[i].group_rank != 0));
    from_state[i].node_addresses.clear();
    CHECK(encode(ServerMessage{m.assignments[i]}) == encode(ServerMessage{from_state[i]}));
  }
  // A join refused: its agent reads, the others do not.
  EtcdRoundState x = w;
  x.refused["d"] = Reject{"rank taken", Refusal::rank_taken};
  const std::optional<EtcdRoundSummary> w_known = round.summary(std::nullopt, w);
  m = decoded(round.summary(w, x));
  CHECK(concerns(m, w_known, "d"));
  CHECK_FALSE(concerns(m, w_known, "a"));
  CHECK_FALSE(m.stop);
  // Every member done: the job's end, in the summary too.
  EtcdRoundState y = w;
  for (const auto& id : {"a", "b", "c"}) round.done(y, id, y.round);
  REQUIRE(y.phase == Phase::ended);
  m = decoded(round.summary(w, y));
  REQUIRE(m.stop);
  CHECK(encode(ServerMessage{*m.stop}) == encode(ServerMessage{*y.stop}));
  // A summary of another layout is none: the agent reads the state, which says why.
  auto j = nlohmann::json::parse(encode_summary(m));
  j["layout"] = 2;
  CHECK_FALSE(decode_summary(j.dump()));
}

TEST_CASE("etcd round: joins and dones are keys of their own, taken in by one change", "[etcd]") {
  RoundOptions o = options(2, 2, 0);
  o.static_ranks = true;
  EtcdRound round(o, "etcd:2379", 15);
  auto join = [](const std::string& host, int rank, std::uint64_t seq, std::int64_t rev) {
    NodeDescriptor n = node(host);
    n.node_rank = rank;
    return EtcdJoin{0, seq, n, rev};
  };
  const auto none = [](EtcdRoundState&, double) { return false; };
  EtcdKeys keys;
  keys.live = {"a", "b", "c"};
  // Written in the order b, a; c takes a's rank; a dead agent's join is not taken.
  keys.joins = {{"a", join("a", 0, 1, 11)},
                {"b", join("b", 1, 1, 10)},
                {"c", join("c", 0, 1, 12)},
                {"gone", join("gone", 1, 1, 9)}};
  EtcdRoundState s;
  REQUIRE(round.apply(s, keys, none, 100));
  s = stored(s);
  REQUIRE(s.phase == Phase::running);
  CHECK(s.participants[0].id == "b");
  CHECK(s.participants[1].id == "a");
  CHECK(s.refused.at("c").kind == Refusal::rank_taken);
  CHECK(s.joins_taken.at("c") == 1);
  CHECK_FALSE(s.joins_taken.count("gone"));
  // Taken once: the same keys change nothing more until every member answers.
  CHECK_FALSE(round.apply(s, keys, none, 101));
  keys.answers = {{"a", s.round}, {"b", s.round}};
  REQUIRE(round.apply(s, keys, none, 102));
  REQUIRE(s.started);
  // The exit barrier: one member's done key, then the other's, from this job only.
  keys.done = {{"a", EtcdDone{0, s.round}}, {"b", EtcdDone{1, s.round}}};
  CHECK(round.apply(s, keys, none, 103));
  CHECK(s.phase == Phase::running);
  keys.done["b"] = EtcdDone{0, s.round};
  CHECK(round.apply(s, keys, none, 104));
  CHECK(stored(s).phase == Phase::ended);
  CHECK(s.stop->exit_code == 0);
}

TEST_CASE("etcd round: what the state keeps of a node's join goes with its key", "[etcd]") {
  // Elastic, restarts left: agents come and go for as long as the job runs; the state keeps
  // only the live ones' joins, not every agent's that ever joined.
  EtcdRound round(options(1, 3, 10), "etcd:2379", 15);
  const auto none = [](EtcdRoundState&, double) { return false; };
  EtcdKeys keys;
  EtcdRoundState s;
  double now = 100;
  for (int i = 0; i < 20; ++i) {
    const std::string id = "n" + std::to_string(i);
    keys.live = {"keep", id};
    keys.joins = {{"keep", EtcdJoin{0, 1, node("keep"), 1}}, {id, EtcdJoin{0, 1, node(id), 2 + i}}};
    round.apply(s, keys, none, now += 10);
    s = stored(s);
    REQUIRE(s.joins_taken.count(id));
  }
  CHECK(s.joins_taken == std::map<std::string, std::uint64_t>{{"keep", 1}, {"n19", 1}});
  // A refused join is read by its agent, which then stops: its key gone, the refusal goes too.
  RoundOptions fixed = options(1, 1, 0);
  fixed.static_ranks = true;
  EtcdRound static_round(fixed, "etcd:2379", 15);
  EtcdRoundState t;
  NodeDescriptor second = node("b");
  second.node_rank = 0;
  NodeDescriptor first = node("a");
  first.node_rank = 0;
  keys = EtcdKeys{};
  keys.live = {"a", "b"};
  keys.joins = {{"a", EtcdJoin{0, 1, first, 1}}, {"b", EtcdJoin{0, 1, second, 2}}};
  REQUIRE(static_round.apply(t, keys, none, 100));
  REQUIRE(t.refused.count("b"));
  keys.live = {"a"};
  keys.joins.erase("b");
  CHECK(static_round.apply(t, keys, none, 101));
  CHECK_FALSE(stored(t).refused.count("b"));
  CHECK_FALSE(stored(t).joins_taken.count("b"));
}
