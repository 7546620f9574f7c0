#include "trainrun/launch/rollcall/roll_call.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

using namespace trainrun::launch;

namespace {

// A node's answer of `ranks` workers, each with a stack of one frame named `function`.
nlohmann::json answer_of(int ranks, const std::string& function) {
  NodeWorkers node{1, 2, "node1", "/logs/run", {}, std::nullopt};
  std::vector<trainrun::stacks::Stack> stacks;
  for (int r = 0; r < ranks; ++r) {
    node.workers.push_back({2 + r, r, 100 + r});
    trainrun::stacks::Stack s;
    s.pid = 100 + r;
    s.tool = "py-spy";
    trainrun::stacks::Thread t;
    t.tid = s.pid;
    t.frames.push_back({function, "train.py", 7, "", trainrun::stacks::FrameKind::python});
    s.threads.push_back(t);
    stacks.push_back(s);
  }
  return node_answer(node, stacks, {}, "/logs/run/stacks/t", "");
}

}  // namespace

TEST_CASE("a node's answer is cut to its bound, still a valid answer that says so", "[stacks]") {
  const nlohmann::json small = answer_of(2, "stuck_here");
  CHECK(fit_node_answer(small, 1 << 20) == small.dump());

  const nlohmann::json big = answer_of(8, std::string(1000, 'f'));
  const std::string whole = big.dump();
  const std::string cut = fit_node_answer(big, whole.size() - 1500);
  CHECK(cut.size() <= whole.size() - 1500);
  const auto reply = nlohmann::json{{"run_id", "r"},
                                    {"nodes", {nlohmann::json::parse(cut)}},
                                    {"missing", nlohmann::json::array()},
                                    {"not_asked", ""}};
  const std::string report = format_roll_call(reply);
  CHECK_THAT(report, Catch::Contains("stacks of run r: 8 ranks on 1 node"));
  CHECK_THAT(report, Catch::Contains("ranks of this node were left out to fit"));

  // Not even the node's names fit: the node is still named, without stacks.
  const auto bare = nlohmann::json::parse(fit_node_answer(big, 100));
  CHECK(bare.at("ranks").empty());
  CHECK(bare.at("host") == "node1");
}

TEST_CASE("a report says why the other nodes were not asked, and who did not answer", "[stacks]") {
  const auto reply = nlohmann::json{
      {"run_id", "r"},
      {"nodes", {answer_of(1, "f"), {{"error", "this node's answer was left out"}}}},
      {"missing", {{{"host", "node2 (10.0.0.2, pid 9)"}, {"reason", "no answer within 15 s"}}}},
      {"not_asked", ""}};
  const std::string report = format_roll_call(reply);
  CHECK_THAT(report, Catch::Contains("a node: this node's answer was left out"));
  CHECK_THAT(report,
             Catch::Contains("node2 (10.0.0.2, pid 9) did not answer: no answer within 15 s"));

  const auto etcd =
      nlohmann::json{{"run_id", "r"},
                     {"nodes", {answer_of(1, "f")}},
                     {"missing", nlohmann::json::array()},
                     {"not_asked", "on an etcd job, run trainrun --stacks on each node"}};
  CHECK_THAT(format_roll_call(etcd),
             Catch::Contains("the job has 2 nodes: only this one's workers are shown (on an etcd "
                             "job, run trainrun --stacks on each node)"));
}

namespace {

// Node `node` of `nodes`, 8 ranks, each in `function_of(rank)`; its dumps under /logs/run/stacks.
template <typename FunctionOf>
nlohmann::json node_of(int node, int nodes, FunctionOf function_of) {
  NodeWorkers workers{node, nodes, fmt::format("host{}", node), "/logs/run", {}, std::nullopt};
  std::vector<trainrun::stacks::Stack> stacks;
  for (int l = 0; l < 8; ++l) {
    const int rank = node * 8 + l;
    workers.workers.push_back({rank, l, 100 + l});
    trainrun::stacks::Stack s;
    s.pid = 100 + l;
    s.tool = "py-spy";
    trainrun::stacks::Thread t;
    t.tid = s.pid;
    t.frames.push_back({function_of(rank), "train.py", 7, "", trainrun::stacks::FrameKind::python});
    s.threads.push_back(t);
    stacks.push_back(s);
  }
  return node_answer(workers, stacks, {}, fmt::format("/logs/run/stacks/{}", node), "");
}

std::size_t lines_of(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("a report of a thousand nodes is grouped and bounded, the odd rank's node named",
          "[stacks]") {
  nlohmann::json nodes = nlohmann::json::array();
  for (int n = 0; n < 1024; ++n)
    nodes.push_back(node_of(n, 1024, [](int rank) {
      return rank == 4242 ? std::string("stuck_here") : std::string("all_reduce");
    }));
  for (int n = 0; n < 20; ++n) nodes[n]["error"] = "the stacks of 1 rank were left out";
  nlohmann::json missing = nlohmann::json::array();
  for (int n = 0; n < 12; ++n)
    missing.push_back({{"host", fmt::format("late{}", n)}, {"reason", "no answer within 15 s"}});
  const nlohmann::json reply{
      {"run_id", "r"}, {"nodes", nodes}, {"missing", missing}, {"not_asked", ""}};
  const std::string report = format_roll_call(reply);
  // One line a node, before: its dumps.
  CHECK(lines_of(report) < 30);
  CHECK_THAT(report, Catch::Contains("stacks of run r: 8192 ranks on 1024 nodes"));
  CHECK_THAT(report, Catch::Contains("rank 4242 (1): stuck_here"));
  CHECK_THAT(report, Catch::Contains("rank 4242 on host530 (node 530) is in stuck_here()"));
  CHECK_THAT(report, Catch::Contains("dumps of host530 (node 530): /logs/run/stacks/530\n"));
  CHECK_THAT(report, Catch::Contains("dumps of 1016 more nodes: on each node, under "
                                     "/logs/run/stacks/\n"));
  CHECK_THAT(report, Catch::Contains("host0 (node 0), host1 (node 1)"));
  CHECK_THAT(report, Catch::Contains("and 12 more: the stacks of 1 rank were left out\n"));
  CHECK_THAT(report, Catch::Contains("late0, late1, late2, late3, late4, late5, late6, late7 and "
                                     "4 more did not answer: no answer within 15 s\n"));
}

TEST_CASE("a report of many stack groups lists the smallest and the largest", "[stacks]") {
  nlohmann::json nodes = nlohmann::json::array();
  // 40 ranks each in a function of its own, the other 88 together.
  for (int n = 0; n < 16; ++n)
    nodes.push_back(node_of(n, 16, [](int rank) {
      return rank < 40 ? fmt::format("f{}", rank) : std::string("all_reduce");
    }));
  const nlohmann::json reply{
      {"run_id", "r"}, {"nodes", nodes}, {"missing", nlohmann::json::array()}, {"not_asked", ""}};
  const std::string report = format_roll_call(reply);
  CHECK_THAT(report, Catch::Contains("rank 0 (1): f0\n"));
  CHECK_THAT(report, Catch::Contains("rank 14 (1): f14\n"));
  CHECK_THAT(report, !Catch::Contains("rank 15 (1): f15\n"));
  CHECK_THAT(report, Catch::Contains("... 25 more groups, 25 ranks in all (in the dumps)\n"));
  CHECK_THAT(report, Catch::Contains("ranks 40-127 (88): all_reduce\n"));
  CHECK_THAT(report, Catch::Contains("rank 7 on host0 (node 0) is in f7() (train.py:7); and 32 "
                                     "more ranks alone while ranks 40-127 wait in all_reduce "
                                     "(train.py:7)\n"));
  CHECK_THAT(report, Catch::Contains("dumps of 8 more nodes: on each node, under "
                                     "/logs/run/stacks/\n"));
}

TEST_CASE("a reply's lists are read in place, not copied", "[stacks]") {
  const nlohmann::json reply{{"nodes", {node_of(0, 1, [](int) { return std::string("f"); })}},
                             {"missing", "not a list"}};
  CHECK(&json_list(reply, "nodes") == &reply.at("nodes"));
  CHECK(&json_list(reply.at("nodes")[0], "ranks") == &reply.at("nodes")[0].at("ranks"));
  CHECK(json_list(reply, "missing").empty());
  CHECK(json_list(reply, "absent").empty());
  CHECK(json_list(nlohmann::json("text"), "nodes").empty());
}

TEST_CASE("a node's answer is valid UTF-8 whatever bytes the stacks hold", "[stacks]") {
  // A thread name the kernel cut inside a character, a library path that is not UTF-8.
  NodeWorkers node{0, 1, "host\xff", "/logs/run", {{0, 0, 100}}, std::nullopt};
  trainrun::stacks::Stack s;
  s.pid = 100;
  trainrun::stacks::Thread t;
  t.tid = 100;
  t.name = "\xc3\xa9\xc3\xa9\xc3";
  t.frames.push_back(
      {"stuck_here", "", 0, "/opt/\xe9t\xe9/lib.so", trainrun::stacks::FrameKind::native});
  s.threads.push_back(t);
  s.notes.push_back("gdb said \xff");
  const nlohmann::json answer = node_answer(node, {s}, {}, "/logs/\xfe", "");
  // Strict: the hang report and the job summary are built from this answer and dumped so.
  const std::string text = answer.dump();
  CHECK(answer.at("host") == "host\xef\xbf\xbd");
  const auto& thread = answer.at("ranks").at(0).at("stack").at("threads").at(0);
  CHECK(thread.at("name") == "\xc3\xa9\xc3\xa9\xef\xbf\xbd");
  CHECK(thread.at("frames").at(0).at("module") == "/opt/\xef\xbf\xbdt\xef\xbf\xbd/lib.so");
  CHECK(fit_node_answer(answer, 1 << 20) == text);
}

TEST_CASE("the stack tools' timeout comes from the environment, checked", "[stacks]") {
  CHECK(stack_tool_timeout(nullptr) == trainrun::stacks::CollectOptions{}.timeout);
  CHECK(stack_tool_timeout("") == trainrun::stacks::CollectOptions{}.timeout);
  CHECK(stack_tool_timeout("1") == std::chrono::milliseconds(1000));
  CHECK(stack_tool_timeout("0.5") == std::chrono::milliseconds(500));
  for (const char* bad : {"0", "0.01", "601", "ten", "1s", "nan", "-1"}) {
    INFO(bad);
    CHECK_THROWS_WITH(stack_tool_timeout(bad),
                      Catch::StartsWith(std::string("TRAINRUN_STACK_TOOL_TIMEOUT=") + bad +
                                        ": not a number of seconds from 0.1 to 600"));
  }
}

TEST_CASE("a job is named by its run id, a lone one by its entrypoint and agent", "[stacks]") {
  JobEntry e;
  e.pid = 4242;
  e.run_id = "job7";
  e.entrypoint = "/home/u/train.py";
  CHECK(job_title(e) == "run job7");
  e.run_id = "none";
  e.lone = true;
  CHECK(job_title(e) == "train.py (trainrun pid 4242)");
  // It travels with the registration, read back as written.
  const auto read = parse_entry(entry_json(e));
  REQUIRE(read);
  CHECK(job_title(*read) == "train.py (trainrun pid 4242)");

  const auto reply = nlohmann::json{{"run_id", "none"},
                                    {"job", job_title(e)},
                                    {"nodes", {answer_of(1, "f")}},
                                    {"missing", nlohmann::json::array()},
                                    {"not_asked", ""}};
  CHECK_THAT(format_roll_call(reply),
             Catch::StartsWith("stacks of train.py (trainrun pid 4242): 1 rank on 1 node\n"));
}
