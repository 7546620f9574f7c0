// The stack collector off the event loop, against a real process and a real (hanging) tool.
#include "trainrun/launch/rollcall/stack_collector.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "proc.hpp"
#include "test_support.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/launch/workers/diagnosis.hpp"
#include "workers/python_bootstrap.hpp"

using namespace trainrun::launch;
namespace stacks = trainrun::stacks;

namespace {

// A native process that sleeps until killed (and reaped) with this object.
class Sleeper {
 public:
  Sleeper() {
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::execl("/bin/sleep", "sleep", "600", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Sleeper() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// Whether process `pid` runs (a zombie does not), waiting up to 10 s for it to end.
bool still_runs(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    const auto state = stacks::read_process_state(pid);
    if (!state || state->state == 'Z') return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace

TEST_CASE("a collection is handed back on the loop, never from within the call", "[stacks]") {
  Sleeper target;
  boost::asio::io_context io;
  stacks::CollectOptions options;
  options.path = trainrun::test::make_temp_dir("collector-no-tools");  // /proc alone
  StackCollector collector(io, options);
  std::vector<stacks::Stack> got;
  bool done = false;
  // As the agent's sockets do: the collection itself keeps no loop running.
  auto work = boost::asio::make_work_guard(io);
  collector.collect({{target.pid()}}, [&](StackCollector::Collected c) {
    got = std::move(c.stacks);
    done = true;
    work.reset();
  });
  CHECK_FALSE(done);
  io.run_for(std::chrono::seconds(60));
  REQUIRE(done);
  REQUIRE(got.size() == 1);
  CHECK(got[0].pid == target.pid());
  CHECK(got[0].tool == "/proc");
}

TEST_CASE("a collector that ends kills its running tool and drops its collections", "[stacks]") {
  Sleeper target;
  const std::string dir = trainrun::test::make_temp_dir("collector-hang");
  const std::string started = dir + "/started";
  {
    std::ofstream tool(dir + "/eu-stack");
    tool << "#!/bin/sh\necho $$ > '" << started << ".tmp' && mv '" << started << ".tmp' '"
         << started << "'\nexec /bin/sleep 600\n";
  }
  REQUIRE(::chmod((dir + "/eu-stack").c_str(), 0755) == 0);
  boost::asio::io_context io;
  stacks::CollectOptions options;
  options.path = dir;
  // Far longer than the test waits: the tool ends by the collector's end or not at all.
  options.timeout = std::chrono::seconds(600);
  auto collector = std::make_unique<StackCollector>(io, options);
  int handed_back = 0;
  collector->collect({{target.pid()}}, [&](StackCollector::Collected) { ++handed_back; });
  collector->collect({{target.pid()}}, [&](StackCollector::Collected) { ++handed_back; });
  for (int i = 0; i < 6000 && ::access(started.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::ifstream pid_file(started);
  pid_t tool_pid = 0;
  REQUIRE(pid_file >> tool_pid);
  auto ended = std::async(std::launch::async, [&] { collector.reset(); });
  const bool at_once = ended.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  // Else the end waits for the tool: killed here, so that the test ends.
  if (!at_once) ::kill(tool_pid, SIGKILL);
  ended.wait();
  CHECK(at_once);
  CHECK_FALSE(still_runs(tool_pid));
  io.run_for(std::chrono::milliseconds(200));
  CHECK(handed_back == 0);
}

TEST_CASE("a Python worker with a diagnosis channel tells its own threads where no tool can",
          "[stacks]") {
  // A worker as the supervisor starts one: `python -u job.py`, the bootstrap in its environment.
  const std::string dir = trainrun::test::make_temp_dir("collector-diagnosis");
  {
    std::ofstream script(dir + "/job.py");
    script << "import threading, time\n"
              "def stuck_here():\n"
              "    time.sleep(600)\n"
              "threading.Thread(target=stuck_here, name='helper', daemon=True).start()\n"
              "open('"
           << dir
           << "/ready', 'w').close()\n"
              "stuck_here()\n";
  }
  auto channel = open_diagnosis_channel();
  REQUIRE(channel);
  PythonBootstrap python;
  trainrun::SpawnRequest request;
  request.program = "/usr/bin/python3";
  request.argv = {"python3", "-u", dir + "/job.py"};
  request.env.emplace();
  for (char** entry = environ; *entry; ++entry) request.env->push_back(*entry);
  const trainrun::Child child =
      trainrun::spawn(with_diagnosis_bootstrap(request, channel->worker, python.dir()));
  REQUIRE(child.pid > 0);
  ::close(channel->worker);
  for (int i = 0; i < 3000 && ::access((dir + "/ready").c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  boost::asio::io_context io;
  stacks::CollectOptions options;
  options.path = trainrun::test::make_temp_dir("collector-diagnosis-no-tools");
  StackCollector collector(io, options);
  StackCollector::Collected got;
  auto work = boost::asio::make_work_guard(io);
  collector.collect({{child.pid, ::dup(channel->agent)}}, [&](StackCollector::Collected c) {
    got = std::move(c);
    work.reset();
  });
  io.run_for(std::chrono::seconds(60));
  ::kill(child.pid, SIGKILL);
  ::waitpid(child.pid, nullptr, 0);
  ::close(channel->agent);
  REQUIRE(got.stacks.size() == 1);
  const stacks::Stack& stack = got.stacks[0];
  CHECK(stack.tool == "trainrun");
  REQUIRE(stack.threads.size() == 2);  // the channel's own thread left out
  CHECK(stack.threads[0].tid == child.pid);
  REQUIRE(stack.threads[0].frames.size() == 2);  // none of the bootstrap's
  CHECK(stack.threads[0].frames[0].function == "stuck_here");
  CHECK(stack.threads[0].frames[1].function == "<module>");
  CHECK(stack.threads[1].name == "helper");
  // No torch.distributed in that process: no flight recorder to read.
  REQUIRE(got.recorders.size() == 1);
  CHECK(got.recorders[0].is_null());
}
