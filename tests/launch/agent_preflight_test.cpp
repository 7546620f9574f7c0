#include "agent/agent_preflight.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "sample_offer.hpp"
#include "test_support.hpp"

using namespace trainrun::launch;
namespace rendezvous = trainrun::rendezvous;

namespace {

struct Events {
  std::vector<std::string> said;
  std::vector<std::string> happened;
  AgentPreflight::Hooks hooks() {
    AgentPreflight::Hooks h;
    h.say = [this](const std::string& line, Level) { said.push_back(line); };
    h.failed = [this](const std::string& line) { happened.push_back("failed: " + line); };
    return h;
  }
  RaiseEvent raise() {
    return [this](AgentEvent e) {
      if (std::holds_alternative<event::Assignment>(e)) happened.push_back("passed");
    };
  }
};

}  // namespace

TEST_CASE("the preflight's offer names the file behind the entrypoint", "[agent]") {
  LaunchConfig c;
  c.entrypoint = "train.py";
  c.entry_mode = EntryMode::python_script;
  LocalRun run = preflight_local_run(c, "/usr/bin/python3", "3.11.2", "2.1.0");
  CHECK(run.entrypoint == "train.py");
  CHECK(run.entrypoint_file == "train.py");
  CHECK(run.python == "3.11.2");
  CHECK(run.torch == "2.1.0");
  c.entrypoint = "./train";
  c.entry_mode = EntryMode::executable;
  run = preflight_local_run(c, "/work/train", "", "");
  CHECK(run.entrypoint_file == "/work/train");
  CHECK(run.python.empty());
  c.entrypoint = "mypkg.train";
  c.entry_mode = EntryMode::python_module;
  CHECK(preflight_local_run(c, "/usr/bin/python3", "", "").entrypoint_file.empty());
}

TEST_CASE("an open preflight offers its port; a round without peers to check starts at once",
          "[agent]") {
  boost::asio::io_context io;
  AgentPreflight preflight(io, PreflightMode::on);
  CHECK_FALSE(preflight.offer());
  Events events;
  LaunchConfig c;
  c.entrypoint = "train.py";
  preflight.open(preflight_local_run(c, "/usr/bin/python3", "", ""), events.hooks(),
                 events.raise());
  REQUIRE(preflight.offer());
  CHECK(preflight.offer()->port > 0);
  CHECK(preflight.offer()->entrypoint == "train.py");
  CHECK(events.said.empty());
  rendezvous::Assignment alone;
  CHECK_FALSE(preflight.start(alone, PreflightNode{"hosta", 0, "127.0.0.1"}, "/tmp"));
  preflight.close();
  CHECK(events.happened.empty());
}

TEST_CASE("a preflight that runs no checks offers nothing", "[agent]") {
  boost::asio::io_context io;
  AgentPreflight preflight(io, PreflightMode::on);
  rendezvous::Assignment a;
  a.preflight.push_back({1, "hostb", "127.0.0.1", trainrun::testing::sample_offer()});
  // Never opened: no offer was sent, so no node expects this one's checks.
  CHECK_FALSE(preflight.start(a, PreflightNode{"hosta", 0, "127.0.0.1"}, "/tmp"));
  preflight.drop();
  preflight.close();
}

TEST_CASE("a round's checks run on the loop and end in one verdict, dropped once the job is over",
          "[agent]") {
  boost::asio::io_context io;
  LaunchConfig c;
  c.entrypoint = "train.py";
  const LocalRun run = preflight_local_run(c, "/usr/bin/python3", "", "");
  Events first, second;
  AgentPreflight a(io, PreflightMode::warn), b(io, PreflightMode::warn);
  a.open(run, first.hooks(), first.raise());
  b.open(run, second.hooks(), second.raise());
  REQUIRE(a.offer());
  REQUIRE(b.offer());
  rendezvous::Assignment round;
  round.group_world_size = 2;
  round.master_addr = "127.0.0.1";
  round.preflight.push_back({1, "hostb", "127.0.0.1", *b.offer()});
  const std::string log_dir = trainrun::test::make_temp_dir("agent_preflight");
  REQUIRE(a.start(round, PreflightNode{"hosta", 0, "127.0.0.1"}, log_dir));
  while (first.happened.empty() && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  REQUIRE(first.happened.size() == 1);
  CHECK(first.happened[0] == "passed");

  // A stop that came while the checks ran drops their verdict.
  REQUIRE(a.start(round, PreflightNode{"hosta", 0, "127.0.0.1"}, log_dir));
  a.drop();
  io.restart();
  io.run_for(std::chrono::milliseconds(200));
  CHECK(first.happened.size() == 1);
  a.close();
  b.close();
}
