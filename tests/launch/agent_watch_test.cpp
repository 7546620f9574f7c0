#include "agent/agent_watch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"
#include "trainrun/launch/core/errors.hpp"

using namespace trainrun::launch;

namespace {

HangReport report() {
  HangReport r;
  r.line = "rank 2 on node1 is in stuck_here() (train.py:41)";
  r.text = "the roll call\n";
  r.json = {{"quiet_s", 31.0}, {"line", r.line}};
  r.rank = 2;
  r.local_rank = 0;
  r.pid = 4242;
  return r;
}

struct Said {
  std::vector<std::pair<std::string, Level>> lines;
  std::function<void(const std::string&, Level)> hook() {
    return [this](const std::string& line, Level level) { lines.emplace_back(line, level); };
  }
};

AgentWatch::Hooks hooks(Said& said) {
  AgentWatch::Hooks h;
  h.workers = [] { return NodeWorkers{}; };
  h.say = said.hook();
  return h;
}

JobEntry entry(const std::string& log_dir) {
  return JobEntry{::getpid(), "run1", -1, "hosta",    log_dir, "",
                  "train.py", "/",    0,  "train.py", false};
}

}  // namespace

TEST_CASE("a confirmed hang: its lines, and the failure it stands for", "[agent]") {
  const HangReport r = report();
  const std::string text = hang_text(r, 30);
  CHECK(text.find("the job is hung: no worker made progress for 31 s (--hang-timeout=30) and no "
                  "rank's stack moved in 3 s: rank 2 on node1") != std::string::npos);
  CHECK(text.size() > r.text.size());
  CHECK(text.compare(text.size() - r.text.size(), r.text.size(), r.text) == 0);

  const HangFailure written = hang_failure(r, text, "hosta", 1000, "/logs/attempt_0/hang.txt");
  CHECK(written.text == text);
  CHECK(written.hang["report_file"] == "/logs/attempt_0/hang.txt");
  CHECK(written.failure.rank == 2);
  CHECK(written.failure.pid == 4242);
  CHECK(written.failure.host == "hosta");  // the report names none: this node
  CHECK(written.failure.status.code == kHangExitCode);
  CHECK(written.failure.timestamp == 1000);
  CHECK(written.failure.message == "hung: " + r.line);
  CHECK(written.failure.has_error_file);
  CHECK(written.failure.error_file == "/logs/attempt_0/hang.txt");

  HangReport elsewhere = r;
  elsewhere.host = "node1";
  const HangFailure unwritten = hang_failure(elsewhere, text, "hosta", 1000);
  CHECK(unwritten.failure.host == "node1");
  CHECK_FALSE(unwritten.failure.has_error_file);
  CHECK_FALSE(unwritten.hang.contains("report_file"));
}

TEST_CASE("the watch registers the job and, with --hang-timeout, makes the heartbeat file",
          "[agent]") {
  boost::asio::io_context io;
  const std::string dir = trainrun::test::make_temp_dir("agent_watch");
  Said said;
  AgentWatch watch(io, {{"TRAINRUN_RUNTIME_DIR", dir}}, entry(dir), 30, dir + "/heartbeat",
                   hooks(said), [](AgentEvent) {});
  CHECK(said.lines.empty());
  CHECK(watch.watching());
  CHECK(watch.heartbeat_file() == dir + "/heartbeat");
  struct stat st {};
  CHECK(::stat((dir + "/heartbeat").c_str(), &st) == 0);
  CHECK_FALSE(watch.suspected());
  std::string answer;
  watch.answer([&](std::string a) { answer = std::move(a); }, 1 << 20);
  watch.close();
}

TEST_CASE(
    "a job whose roll call cannot register runs without it; with --hang-timeout it is refused",
    "[agent]") {
  boost::asio::io_context io;
  const std::string dir = trainrun::test::make_temp_dir("agent_watch_off");
  Said said;
  // A file where the runtime directory should be: nothing can register there.
  const std::string blocked = dir + "/not_a_dir";
  ::close(::creat(blocked.c_str(), 0600));
  const std::map<std::string, std::string> env{{"TRAINRUN_RUNTIME_DIR", blocked + "/sub"}};
  try {
    AgentWatch refused(io, env, entry(dir), 30, dir + "/heartbeat", hooks(said), [](AgentEvent) {});
    FAIL("a hang watch without its roll call was made");
  } catch (const SetupError& e) {
    CHECK(std::string(e.what()).rfind("--hang-timeout needs the roll call, which cannot start: ",
                                      0) == 0);
  }
  CHECK(said.lines.empty());
  AgentWatch watch(io, env, entry(dir), 0, dir + "/heartbeat", hooks(said), [](AgentEvent) {});
  REQUIRE(said.lines.size() == 1);
  CHECK(said.lines[0].first.rfind("trainrun --stacks cannot reach this job: ", 0) == 0);
  CHECK_FALSE(watch.watching());
  CHECK(watch.heartbeat_file().empty());
  std::string answer;
  watch.answer([&](std::string a) { answer = std::move(a); }, 1 << 20);
  CHECK(answer == R"({"error": "this node's agent could not start its roll call"})");
}

TEST_CASE("without --hang-timeout the watch has no heartbeat file", "[agent]") {
  boost::asio::io_context io;
  const std::string dir = trainrun::test::make_temp_dir("agent_watch_no_timeout");
  Said said;
  AgentWatch watch(io, {{"TRAINRUN_RUNTIME_DIR", dir}}, entry(dir), 0, dir + "/heartbeat",
                   hooks(said), [](AgentEvent) {});
  CHECK_FALSE(watch.watching());
  CHECK(watch.heartbeat_file().empty());
  struct stat st {};
  CHECK(::stat((dir + "/heartbeat").c_str(), &st) != 0);
  watch.close();
}
