#include "agent/agent_workers.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <variant>
#include <vector>

#include "agent/agent_event_queue.hpp"
#include "agent/agent_plan.hpp"
#include "agent/agent_policy.hpp"
#include "test_support.hpp"
#include "trainrun/launch/workers/watchdog.hpp"

using namespace trainrun::launch;
namespace asio = boost::asio;

namespace {

// A node of `nproc` workers running `sh -c script`, without a rendezvous: the policy decides on
// the events AgentWorkers raises, AgentWorkers carries out what concerns the group, the rest is
// written down here.
struct Node {
  explicit Node(int nproc, const std::string& script) : config(make_config(nproc, script)) {
    logs.create("run1");
  }

  static LaunchConfig make_config(int nproc, const std::string& script) {
    LaunchConfig c;
    c.nproc_per_node = nproc;
    c.entrypoint = "/bin/sh";
    c.entry_mode = EntryMode::executable;
    c.entry_args = {"-c", script};
    c.shutdown_timeout = 30;
    c.log_dir = trainrun::test::make_temp_dir("agent_workers");
    return c;
  }

  void carry_out(const AgentAction& a) {
    if (auto* start = std::get_if<action::StartWorkers>(&a)) {
      started.push_back(false);
      const std::size_t at = started.size() - 1;
      workers.start(start->topology, job_settings(config, "run1"), {}, false, {},
                    [this, at] { started[at] = true; });
    } else if (auto* signal = std::get_if<action::SignalWorkers>(&a))
      workers.signal(*signal, false);
    else if (auto* grace = std::get_if<action::ArmGraceTimer>(&a))
      workers.arm_grace(*grace);
    else if (auto* sweep = std::get_if<action::Sweep>(&a)) {
      ++sweeps;  // every one through here, where the agent stops its hang watch first
      workers.sweep(*sweep);
    } else if (auto* say = std::get_if<action::Say>(&a))
      said.push_back(say->line);
    else if (std::holds_alternative<action::WriteSummary>(a))
      said.push_back("summary");
    else if (auto* finish = std::get_if<action::Finish>(&a)) {
      exit_code = finish->exit_code;
      io.stop();
    }
  }

  // As the agent handles the events raised.
  void raise(AgentEvent e) {
    events.raise(std::move(e), [this](const AgentEvent& next) {
      for (const AgentAction& a : policy.handle(next, AgentPolicy::Clock::now())) carry_out(a);
    });
  }

  // Runs the job to its end, reaping on SIGCHLD as the agent does.
  int run() {
    asio::signal_set children(io, SIGCHLD);
    std::function<void()> wait = [&] {
      children.async_wait([&](boost::system::error_code ec, int) {
        if (ec) return;
        workers.reap();
        wait();
      });
    };
    wait();
    raise(event::StartSingleNode{29500});
    io.run();
    return exit_code;
  }

  asio::io_context io;
  Watchdog watchdog;  // not started: nothing to stop should the test die
  AgentConsoles consoles{io};
  LaunchConfig config;
  AgentPolicy policy{config, "hosta"};
  AgentEventQueue events;
  JobLogs logs{config};
  AgentWorkers workers{
      io,        watchdog, consoles, config,
      "/bin/sh", "hosta",  logs,     [this](AgentEvent e) { raise(std::move(e)); }};
  std::vector<bool> started;
  int sweeps = 0;
  std::vector<std::string> said;
  int exit_code = -1;
};

}  // namespace

TEST_CASE("a group that succeeds is started, reaped and swept", "[agent]") {
  Node node(2, "exit 0");
  CHECK(node.workers.node_rank() == -1);
  CHECK(node.run() == 0);
  CHECK(node.started == std::vector<bool>{true});
  CHECK(node.sweeps == 1);
  CHECK(node.workers.node_rank() == 0);
  CHECK(node.workers.attempt() == 0);
  CHECK(node.workers.node_workers().workers.empty());
  CHECK(node.workers.attempt_path("hang.txt") == node.logs.dir().run_dir() + "/attempt_0/hang.txt");
  CHECK(node.said.empty());
}

TEST_CASE("a worker's failure is read from its rank directory and stops the group", "[agent]") {
  // Rank 1 fails; rank 0 would run on, and is stopped.
  Node node(2, "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exec sleep 60");
  CHECK(node.run() == 3);
  REQUIRE(node.policy.failures().size() == 1);
  CHECK(node.policy.failures()[0].rank == 1);
  CHECK(node.policy.failures()[0].local_rank == 1);
  CHECK(node.said == std::vector<std::string>{"summary"});
}

TEST_CASE("a group that cannot start tells the policy, which ends the node", "[agent]") {
  Node node(1, "exit 0");
  // A file where the run directory was: no rank directory can be made in it.
  const std::string run_dir = node.logs.dir().run_dir();
  REQUIRE(::rmdir(run_dir.c_str()) == 0);
  ::close(::creat(run_dir.c_str(), 0600));
  CHECK(node.run() == 1);
  CHECK(node.started == std::vector<bool>{false});
}
