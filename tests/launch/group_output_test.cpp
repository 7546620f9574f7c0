#include "trainrun/launch/output/group_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <string>

#include "test_support.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"

using namespace trainrun::launch;

namespace {

// What a worker would write on its stream: the child's end, taken over before start() closes it.
int take_child_end(GroupOutput::Ends& ends) {
  const int fd = ::dup(ends.child);
  REQUIRE(fd >= 0);
  return fd;
}

// A group's output over real pipes into real files; the consoles are pipes nobody reads.
struct Group {
  boost::asio::io_context io;
  int console_pipe[2] = {-1, -1};
  std::unique_ptr<Console> console;
  int closed = 0;
  std::unique_ptr<GroupOutput> output;
  Group() {
    REQUIRE(::pipe2(console_pipe, O_CLOEXEC | O_NONBLOCK) == 0);
    console = std::make_unique<Console>(io, console_pipe[1]);
    output = std::make_unique<GroupOutput>(io, *console, *console, [this] { ++closed; });
  }
  ~Group() {
    output.reset();
    console.reset();
    ::close(console_pipe[0]);
  }
  // Runs the event loop until `n` readers have closed (bounded: a stuck reader fails the test).
  void run_until_closed(int n) {
    for (int i = 0; i < 100000 && closed < n; ++i) {
      io.restart();
      io.run_one_for(std::chrono::milliseconds(10));
    }
  }
};

OutputPlan to_files(const std::string& dir) {
  OutputPlan plan;
  plan.out.route = StreamRoute::file;
  plan.out.file = dir + "/stdout.log";
  plan.err.route = StreamRoute::file;
  plan.err.file = dir + "/stderr.log";
  return plan;
}

}  // namespace

TEST_CASE("a worker's streams reach their log files; the end of its stderr is kept", "[output]") {
  const std::string dir = trainrun::test::make_temp_dir("group_output");
  Group g;
  const OutputPlan plan = to_files(dir);
  g.output->reset();
  GroupOutput::Streams s = g.output->open(plan);
  const int out = take_child_end(s.out), err = take_child_end(s.err);
  g.output->start(s, plan, 3, "[3]:");
  CHECK(s.out.child == -1);
  CHECK(g.output->open_readers() == 2);
  REQUIRE(::write(out, "step 1\n", 7) == 7);
  REQUIRE(::write(err, "Traceback\nValueError: bad\n", 26) == 26);
  ::close(out);
  ::close(err);
  g.run_until_closed(2);
  CHECK(g.output->open_readers() == 0);
  CHECK(trainrun::read_small_file(dir + "/stdout.log") == "step 1\n");
  CHECK(trainrun::read_small_file(dir + "/stderr.log") == "Traceback\nValueError: bad\n");
  CHECK(g.output->stderr_tail(3) == "Traceback\nValueError: bad");
  CHECK(g.output->stderr_tail(0).empty());
}

TEST_CASE("a reader of an earlier group no longer counts once a new one starts", "[output]") {
  const std::string dir = trainrun::test::make_temp_dir("group_output");
  Group g;
  OutputPlan plan = to_files(dir);
  plan.err.route = StreamRoute::inherit;
  GroupOutput::Streams s = g.output->open(plan);
  CHECK(s.err.child == -1);                // inherited: no pipe
  const int held = take_child_end(s.out);  // held open, as by a process outside our tree
  g.output->start(s, plan, 0, "");
  CHECK(g.output->open_readers() == 1);
  g.output->reset();
  CHECK(g.output->open_readers() == 0);
  ::close(held);
  for (int i = 0; i < 100; ++i) {
    g.io.restart();
    g.io.run_one_for(std::chrono::milliseconds(10));
  }
  CHECK(g.closed == 0);
  CHECK(g.output->open_readers() == 0);
}

TEST_CASE("a log file that cannot be opened is a SpawnError that names it", "[output]") {
  Group g;
  OutputPlan plan = to_files("/nonexistent-dir");
  CHECK_THROWS_WITH(g.output->open(plan),
                    Catch::StartsWith("cannot open log file /nonexistent-dir/stdout.log: "));
}
