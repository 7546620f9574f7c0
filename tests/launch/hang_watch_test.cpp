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
        "all_reduce (train.py:7)");
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
  // The report's line begins it (hang_text): the roll call below does not say it again.
  CHECK(r.text.find(r.line) == std::string::npos);
  CHECK(format_roll_call(hung_job(15, 13)).find(r.line) != std::string::npos);

  // No odd rank: the groups say where each waits.
  const HangReport even = hang_report(reply_of({node_of(0, 0, {{"a"}, {"b"}}, 20)}), 20);
  CHECK(even.line == "no rank stands out: rank 0 in a; rank 1 in b");
  CHECK(even.rank == 0);
  CHECK(even.json["suspects"].empty());
}

namespace {

// `reply` with each rank's CPU time and time of reading set, and its stack's terminal.
nlohmann::json with_cpu(nlohmann::json reply, double cpu_s, double read_at,
                        const std::string& terminal = "") {
  for (auto& node : reply["nodes"])
    for (auto& rank : node["ranks"]) {
      rank["stack"]["cpu_s"] = cpu_s;
      rank["stack"]["read_at"] = read_at;
      rank["stack"]["terminal"] = terminal;
    }
  return reply;
}

// Two ranks in one place that never moves: <module> at the same line.
nlohmann::json still_job() { return reply_of({node_of(0, 0, {{"work"}, {"work"}}, 12)}); }

}  // namespace

TEST_CASE("ranks that each use CPU with no collective waiting compute: not hung", "[hang]") {
  // 3 s apart: 2.7 s and 0.9 s of CPU are 90% and 30% of one.
  const auto first = with_cpu(still_job(), 10, 100);
  CHECK(computing(first, with_cpu(still_job(), 12.7, 103)) ==
        "ranks 0-1 used 90% of a CPU with "
        "no collective waiting");
  const HangVerdict v = judge_second(first, with_cpu(still_job(), 12.7, 103), 10);
  CHECK(v.kind == HangVerdict::Kind::progress);
  CHECK(v.stack_moved);
  CHECK_FALSE(v.paused);

  // One rank idle (3% of a CPU, a thread that polls): it waits, and the job is hung as before.
  auto one_idle = with_cpu(still_job(), 12.7, 103);
  one_idle["nodes"][0]["ranks"][1]["stack"]["cpu_s"] = 10.1;
  CHECK(computing(first, one_idle).empty());
  CHECK(judge_second(first, one_idle, 10).kind == HangVerdict::Kind::hung);

  // CPU time unknown (/proc unreadable, an agent of an earlier version): no claim of computing.
  CHECK(computing(still_job(), still_job()).empty());
  CHECK(judge_second(still_job(), still_job(), 10).kind == HangVerdict::Kind::hung);

  // Another process in the second look (a restart between): no comparison.
  auto other = with_cpu(still_job(), 12.7, 103);
  other["nodes"][0]["ranks"][0]["stack"]["pid"] = 999;
  CHECK(computing(first, other).empty());
}

TEST_CASE("a collective started and not completed makes CPU use no sign of computing", "[hang]") {
  // Rank 0 spins inside an all_reduce (as NCCL's wait does) that rank 1 never entered.
  auto first = with_cpu(still_job(), 10, 100);
  auto second = with_cpu(still_job(), 13, 103);
  for (auto* reply : {&first, &second}) {
    (*reply)["nodes"][0]["ranks"][0]["collectives"] = {
        {"groups",
         {{"0", {{"collectives", {{{"seq", 4}, {"op", "all_reduce"}, {"state", "pending"}}}}}}}}};
    (*reply)["nodes"][0]["ranks"][1]["collectives"] = {
        {"groups",
         {{"0", {{"collectives", {{{"seq", 3}, {"op", "all_reduce"}, {"state", "completed"}}}}}}}}};
  }
  CHECK(collective_waiting(second));
  CHECK(computing(first, second).empty());
  CHECK(judge_second(first, second, 10).kind == HangVerdict::Kind::hung);

  // Completed on both: the ranks compute between collectives.
  second["nodes"][0]["ranks"][0]["collectives"]["groups"]["0"]["collectives"][0]["state"] =
      "completed";
  first = second;
  for (auto& rank : first["nodes"][0]["ranks"])
    rank["stack"]["cpu_s"] = 10, rank["stack"]["read_at"] = 100;
  CHECK_FALSE(collective_waiting(second));
  CHECK(judge_second(first, second, 10).kind == HangVerdict::Kind::progress);
  // A point-to-point operation pending is waiting too.
  second["nodes"][0]["ranks"][1]["collectives"]["groups"]["0"]["p2p"] = {
      {{"seq", 1}, {"op", "recv 0->1"}, {"state", "pending"}}};
  CHECK(collective_waiting(second));
}

TEST_CASE("a rank waiting at a terminal or in pdb pauses the watch", "[hang]") {
  auto at_terminal = with_cpu(still_job(), 1, 100, "/dev/pts/3");
  at_terminal["nodes"][0]["ranks"][1]["stack"]["terminal"] = "";
  CHECK(waiting_for_input(at_terminal) == "rank 0 waits for input at /dev/pts/3");
  for (const HangVerdict& v :
       {judge_first(at_terminal, 10), judge_second(at_terminal, at_terminal, 10)}) {
    CHECK(v.kind == HangVerdict::Kind::progress);
    CHECK(v.paused);
    CHECK(v.recheck_s == Approx(10));
    CHECK(v.why == "rank 0 waits for input at /dev/pts/3");
  }
  // pdb, its frames innermost, reading a pipe rather than a terminal.
  auto pdb = still_job();
  auto& frames = pdb["nodes"][0]["ranks"][1]["stack"]["threads"][0]["frames"];
  frames.insert(frames.begin(),
                nlohmann::json(stacks::Frame{"interaction", "/usr/lib/python3.11/pdb.py", 380, "",
                                             stacks::FrameKind::python}));
  CHECK(waiting_for_input(pdb) == "rank 1 is in pdb");
  CHECK(judge_second(pdb, pdb, 10).paused);
  pdb["nodes"][0]["ranks"][1]["stack"]["terminal"] = "/dev/pts/0";
  CHECK(waiting_for_input(pdb) == "rank 1 waits for input at /dev/pts/0 (in pdb)");
  // No rank waits for input: nothing pauses.
  CHECK(waiting_for_input(still_job()).empty());
}
