#include "trainrun/launch/rollcall/roll_call.hpp"

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
