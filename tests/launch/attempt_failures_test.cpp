#include "agent/attempt_failures.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <variant>
#include <vector>

#include "worker_exit.hpp"

using namespace trainrun::launch;
using trainrun::ExitStatus;
using trainrun::test::worker_exit;
namespace rendezvous = trainrun::rendezvous;

namespace {

// Each action as a line; summaries as "summary" (their layout is failure_test's).
std::vector<std::string> lines(const AgentActions& actions) {
  std::vector<std::string> out;
  for (const auto& a : actions) {
    if (auto* say = std::get_if<action::Say>(&a)) out.push_back("say: " + say->line);
    if (std::holds_alternative<action::WriteSummary>(a)) out.push_back("summary");
  }
  return out;
}

}  // namespace

TEST_CASE("a failure that does not count is listed only with a report of its own", "[agent]") {
  AttemptFailures f("train.py", "hosta");
  CHECK_FALSE(f.record(worker_exit(0, ExitStatus{0, SIGTERM}), 4, false));
  CHECK(f.empty());
  CHECK_FALSE(f.record(worker_exit(1, ExitStatus{3, 0}, "ValueError: bad", 100), 4, false));
  REQUIRE(f.list().size() == 1);
  CHECK(f.list()[0].rank == 5);
  CHECK(f.list()[0].timestamp == 100);  // the report's own time, not when the exit was seen
  CHECK(f.list()[0].host == "hosta");
}

TEST_CASE("an unreadable error report is a warning, and the failure names it", "[agent]") {
  AttemptFailures f("train.py", "hosta");
  WorkerExit e = worker_exit(1, ExitStatus{1, 0});
  e.problem = "error.json is not JSON";
  const auto warning = f.record(e, 0, true);
  REQUIRE(warning);
  CHECK(*warning == "worker 1 (local rank 1): error.json is not JSON");
  CHECK(f.list().at(0).message == "error.json is not JSON");
}

TEST_CASE("the other nodes hear of the root cause once per attempt", "[agent]") {
  AttemptFailures f("train.py", "hosta");
  CHECK_FALSE(f.report());
  f.record(worker_exit(1, ExitStatus{7, 0}), 2, true);
  f.record(worker_exit(0, ExitStatus{0, SIGSEGV}), 2, true);
  const auto report = f.report();
  REQUIRE(report);
  CHECK(report->failure.rank == 2);  // the earlier exit
  CHECK(report->failure.exit_code == 128 + SIGSEGV);
  CHECK(report->failures.size() == 2);
  CHECK_FALSE(f.report());
  f.clear();
  f.record(worker_exit(1, ExitStatus{7, 0}), 2, true);
  CHECK(f.report());
}

TEST_CASE("restart lines: the root cause alone, another node's failure from the rendezvous",
          "[agent]") {
  AttemptFailures f("train.py", "hosta");
  f.record(worker_exit(1, ExitStatus{7, 0}), 0, true);
  CHECK(f.restart_line(1, 3) ==
        "worker 1 (local rank 1) failed with exit code 7; restarting the worker group (1 of 3 "
        "restarts)");
  rendezvous::Restart r;
  r.restart_count = 2;
  r.failure = rendezvous::FailureReport{};
  r.failure->host = "hostb";
  r.failure->rank = 3;
  r.failure->exit_code = 9;
  CHECK(f.restart_line(r, 1) ==
        "worker 3 on hostb failed with exit code 9; restarting (2 of 1 "
        "restart)");
  r.failure->host = "hosta";  // ours, reported already
  CHECK_FALSE(f.restart_line(r, 1));
}

TEST_CASE("the exit status of a failed node is its root cause's, never 0", "[agent]") {
  AttemptFailures f("train.py", "hosta");
  f.record(worker_exit(0, ExitStatus{0, 0}, "RuntimeError", 10), 0, true);
  AgentActions out;
  CHECK(f.fail(out) == 1);
  CHECK(lines(out) == std::vector<std::string>{"summary"});
}

TEST_CASE("stopped by the rendezvous: how the node ends", "[agent]") {
  AttemptFailures f("train.py", "hosta");
  AgentActions out;
  rendezvous::Stop finished{rendezvous::StopCause::finished, "", 0, {}};
  CHECK(f.stopped(out, finished, true) == 0);
  CHECK(out.empty());
  CHECK(f.stopped(out, finished, false) == 1);
  CHECK(lines(out) == std::vector<std::string>{
                          "say: the job ended before this node was given work (finished); it ran "
                          "no workers"});
  out.clear();
  rendezvous::FailureReport theirs;
  theirs.host = "hostb";
  theirs.summary = "their summary\n";
  rendezvous::Stop failed{rendezvous::StopCause::worker_failed, "worker failed on hostb", 0,
                          theirs};
  f.record(worker_exit(0, ExitStatus{2, 0}), 0, true);
  CHECK(f.stopped(out, failed, true) == 1);
  CHECK(lines(out) ==
        std::vector<std::string>{"summary", "summary", "say: worker failed on hostb"});
}

TEST_CASE("a hang this node reported: its rank listed once, its summary points to the report",
          "[agent][hang]") {
  AttemptFailures f("train.py", "hosta");
  ProcessFailure hang;
  hang.rank = 3;
  hang.local_rank = 1;
  hang.pid = 1001;  // worker_exit's pid of local rank 1
  hang.host = "hosta";
  hang.status = ExitStatus{124, 0};
  hang.timestamp = 4000;
  hang.has_error_file = true;
  hang.error_file = "/logs/attempt_0/hang.txt";
  hang.message = hang.traceback = "hung: rank 3 on hosta is in stuck_here() (train.py:41)";
  f.add_hang(hang);
  // The hung rank ends on its own meanwhile: still one entry, the hang's.
  f.record(worker_exit(1, ExitStatus{1, 0}), 2, true);
  f.stderr_tails({"", "Fatal Python error: Aborted\n"});
  REQUIRE(f.list().size() == 1);
  CHECK(f.list()[0].status.code == 124);
  CHECK(f.list()[0].stderr_tail.empty());

  AgentActions out;
  CHECK(f.fail(out) == 124);
  const auto& summary = std::get<action::WriteSummary>(out.at(0)).text;
  CHECK_THAT(summary, Catch::Contains("traceback : hung: the line \"trainrun: the job is hung\" "
                                      "above says where; the report is the error_file"));
  CHECK_THAT(summary, !Catch::Contains("stuck_here"));
  // The other nodes did not see the line: what they are told says it.
  const auto report = f.report();
  REQUIRE(report);
  CHECK(report->failures.at(0).traceback == hang.traceback);
  CHECK_THAT(report->failure.summary, Catch::Contains("stuck_here() (train.py:41)"));
}
