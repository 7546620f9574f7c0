#include "trainrun/launch/rollcall/hang_watch.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "trainrun/launch/rollcall/roll_call.hpp"

using namespace trainrun::launch;
namespace stacks = trainrun::stacks;

namespace {

struct Place {
  std::string function;
  int line = 7;
};

// One node's answer: rank base+i at places[i], quiet for `quiet_s` (none: the node does not say).
nlohmann::json node_of(int node, int base, const std::vector<Place>& places,
                       std::optional<double> quiet_s) {
  NodeWorkers workers{node, 2, "node" + std::to_string(node), "/logs/run", {}, quiet_s};
  std::vector<stacks::Stack> found;
  for (std::size_t i = 0; i < places.size(); ++i) {
    const int local = static_cast<int>(i);
    workers.workers.push_back({base + local, local, 100 + base + local});
    stacks::Stack s;
    s.pid = 100 + base + local;
    s.tool = "py-spy";
    stacks::Thread t;
    t.tid = s.pid;
    t.frames.push_back(
        {places[i].function, "train.py", places[i].line, "", stacks::FrameKind::python});
    t.frames.push_back({"<module>", "train.py", 50, "", stacks::FrameKind::python});
    s.threads.push_back(t);
    found.push_back(s);
  }
  return node_answer(workers, found, {}, "/logs/run/stacks/t", "");
}

nlohmann::json reply_of(std::vector<nlohmann::json> nodes) {
  return {{"run_id", "job"},
          {"nodes", std::move(nodes)},
          {"missing", nlohmann::json::array()},
          {"not_asked", ""}};
}

// Four ranks on two nodes; rank 2 in stuck_here, the others in all_reduce.
nlohmann::json hung_job(double quiet0, double quiet1, int stuck_line = 41) {
  return reply_of({node_of(0, 0, {{"all_reduce"}, {"all_reduce"}}, quiet0),
                   node_of(1, 2, {{"stuck_here", stuck_line}, {"all_reduce"}}, quiet1)});
}

}  // namespace

TEST_CASE("the job's quiet time is its least quiet node's", "[hang]") {
  CHECK(job_quiet_s(hung_job(12, 10.5)) == Approx(10.5));
  // A node that does not say (no --hang-timeout there) is left out.
  CHECK(job_quiet_s(reply_of({node_of(0, 0, {{"f"}}, 12), node_of(1, 1, {{"f"}}, std::nullopt)})) ==
        Approx(12));
  CHECK_FALSE(job_quiet_s(reply_of({node_of(0, 0, {{"f"}}, std::nullopt)})));
}

TEST_CASE("a node that made progress within the timeout keeps the job from being hung", "[hang]") {
  const HangVerdict first = judge_first(hung_job(12, 4), 10);
  CHECK(first.kind == HangVerdict::Kind::progress);
  CHECK(first.recheck_s == Approx(6));  // when that node reaches the timeout
  CHECK(judge_first(hung_job(12, 10), 10).kind == HangVerdict::Kind::quiet);

  // Progress between the two roll calls.
  CHECK(judge_second(hung_job(12, 10), hung_job(15, 1), 10).kind == HangVerdict::Kind::progress);
}

TEST_CASE("a job whose nodes did not all answer is never found hung", "[hang]") {
  auto missing = hung_job(12, 12);
  missing["missing"] = {{{"host", "node1 (10.0.0.2, pid 7)"}, {"reason", "no answer within 15 s"}}};
  const HangVerdict v = judge_first(missing, 10);
  CHECK(v.kind == HangVerdict::Kind::progress);
  CHECK(v.why == "node1 (10.0.0.2, pid 7) did not answer");
  auto not_asked = hung_job(15, 15);
  not_asked["not_asked"] = "too many roll calls at once";
  CHECK(judge_second(hung_job(12, 12), not_asked, 10).kind == HangVerdict::Kind::progress);
}

TEST_CASE("a rank whose stack moved between the roll calls is progress; still ones are a hang",
          "[hang]") {
  const auto first = hung_job(12, 10);
  CHECK(judge_second(first, hung_job(15, 13), 10).kind == HangVerdict::Kind::hung);
  // Another line of the same function: the rank is computing, not waiting.
  const HangVerdict moved = judge_second(first, hung_job(15, 13, 42), 10);
  CHECK(moved.kind == HangVerdict::Kind::progress);
  CHECK(moved.stack_moved);
  CHECK(moved.why == "the stack of rank 2 moved");
  CHECK(moved_ranks(first, hung_job(15, 13, 42)) == std::vector<int>{2});
  // The workers ended meanwhile: nothing is hung.
  CHECK(judge_second(first, reply_of({node_of(0, 0, {}, 15)}), 10).kind ==
        HangVerdict::Kind::progress);
}

TEST_CASE("a hang's report names the odd rank, its node and its frame", "[hang]") {
  const HangReport r = hang_report(hung_job(15, 13), 13);
  CHECK(r.line ==
        "rank 2 on node1 (node 1) is in stuck_here() (train.py:41) while ranks 0-1,3 wait in "
        "all_reduce");
  CHECK(r.rank == 2);
  CHECK(r.local_rank == 0);
  CHECK(r.pid == 102);
  CHECK(r.host == "node1 (node 1)");
  const auto suspects = nlohmann::json::parse(
      R"j([{"rank": 2, "host": "node1 (node 1)", "where": "stuck_here() (train.py:41)"}])j");
  CHECK(r.json["suspects"] == suspects);
  CHECK(r.json["groups"].size() == 2);
  CHECK(r.json["quiet_s"] == 13);
  CHECK(r.text.find("rank 2 (1): stuck_here <- <module>") != std::string::npos);

  // No odd rank: the groups say where each waits.
  const HangReport even = hang_report(reply_of({node_of(0, 0, {{"a"}, {"b"}}, 20)}), 20);
  CHECK(even.line == "no rank stands out: rank 0 in a; rank 1 in b");
  CHECK(even.rank == 0);
  CHECK(even.json["suspects"].empty());
}
