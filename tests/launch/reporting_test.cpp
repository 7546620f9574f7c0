// The pure parts of what trainrun says about itself: line format and levels, the new options,
// the loopback warning, the man page and completion, and the job summary document.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/job_summary.hpp"
#include "parse_helpers.hpp"
#include "trainrun/launch/cli/cli_docs.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/core/log.hpp"

using namespace trainrun::launch;
using trainrun::ExitStatus;
using trainrun::test::outcome;
namespace rendezvous = trainrun::rendezvous;

namespace {

std::chrono::system_clock::time_point at(double unix_seconds) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(unix_seconds)));
}

}  // namespace

TEST_CASE("launcher lines: plain, stamped, and filtered by level") {
  const LogFormat plain;
  CHECK(format_launcher_line("hello", Level::info, plain, at(0)) == "trainrun: hello\n");
  CHECK(format_launcher_line("hello", Level::debug, plain, at(0)).empty());
  const LogFormat stamped{Verbosity::verbose, true};
  CHECK(format_launcher_line("hi", Level::debug, stamped, at(1767323045.5)) ==
        "trainrun: 2026-01-02T03:04:05.500Z DEBUG hi\n");
  const LogFormat quiet{Verbosity::quiet, false};
  CHECK(format_launcher_line("x", Level::warning, quiet, at(0)).empty());
  CHECK(format_launcher_line("x", Level::error, quiet, at(0)) == "trainrun: x\n");
  CHECK(iso_time(0.5) == "1970-01-01T00:00:00.500Z");
}

TEST_CASE("-q, -v, --log-timestamps, TRAINRUN_LOG_FORMAT, --summary-file") {
  CHECK(outcome({"x"}).config.verbosity == Verbosity::normal);
  CHECK(outcome({"-q", "x"}).config.verbosity == Verbosity::quiet);
  CHECK(outcome({"--verbose", "x"}).config.verbosity == Verbosity::verbose);
  CHECK(outcome({"x"}, {{"PET_QUIET", "1"}}).config.verbosity == Verbosity::quiet);
  // After the entrypoint, -q and -v are the program's.
  auto c = outcome({"x", "-q", "-v"}).config;
  CHECK(c.verbosity == Verbosity::normal);
  CHECK(c.entry_args == std::vector<std::string>{"-q", "-v"});
  CHECK_THROWS_WITH(outcome({"-q", "-v", "x"}),
                    "-q/--quiet and -v/--verbose cannot be used together");
  CHECK(outcome({"--log-timestamps", "x"}).config.log_timestamps);
  CHECK(outcome({"x"}, {{"TRAINRUN_LOG_FORMAT", "timestamps"}}).config.log_timestamps);
  CHECK_FALSE(outcome({"x"}, {{"TRAINRUN_LOG_FORMAT", "plain"}}).config.log_timestamps);
  // The option (or its PET_ variable) wins over TRAINRUN_LOG_FORMAT.
  CHECK_FALSE(outcome({"x"}, {{"TRAINRUN_LOG_FORMAT", "timestamps"}, {"PET_LOG_TIMESTAMPS", "0"}})
                  .config.log_timestamps);
  CHECK_THROWS_WITH(outcome({"x"}, {{"TRAINRUN_LOG_FORMAT", "json"}}),
                    "TRAINRUN_LOG_FORMAT=json: use timestamps or plain");
  CHECK(outcome({"--summary-file=/tmp/s.json", "x"}).config.summary_file == "/tmp/s.json");
}

TEST_CASE("a loopback address is no warning when the command line is read") {
  // Every node of a job on one machine reaches it; a node on another machine is told where it
  // fails (the rendezvous' retry line, the preflight's MASTER_ADDR check).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--nnodes=2", "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=localhost:29400", "x"},
        {"--nnodes=2", "x"},
        {"--nnodes=2", "--master-addr=node0", "--local-addr=127.0.0.1", "x"}})
    CHECK(outcome(args).warnings.empty());
}

TEST_CASE("the man page and the completion list every option of the table") {
  const std::string page = manual_page();
  const std::string bash = completion_script("bash", "bash");
  for (const auto& doc : option_docs()) {
    for (const auto& name : doc.names) {
      std::string escaped;
      for (char ch : name) escaped += ch == '-' ? std::string("\\-") : std::string(1, ch);
      CHECK_THAT(page, Catch::Contains("\\fB" + escaped + "\\fR"));
      CHECK_THAT(bash, Catch::Contains(" " + name + " "));
    }
  }
  CHECK_THAT(page, Catch::StartsWith(".TH TRAINRUN 1"));
  CHECK_THAT(bash, Catch::Contains("complete -o default -F _trainrun trainrun"));
}

TEST_CASE("the job summary of a restarted, then failed job") {
  JobSummary s("hosta", "train.py", {"--lr", "1"}, 100.0);
  s.set_run_id("job1");
  Topology t;
  t.world_size = 2;
  t.local_world_size = 2;
  s.attempt_started(t, 101.0);
  s.worker_exited(1, 4242, ExitStatus{3, 0}, 102.0, "/logs/1/error.json", "bad");
  s.worker_exited(0, 4241, ExitStatus{0, 15}, 102.5, "", "");
  ProcessFailure f;
  f.rank = f.local_rank = 1;
  f.pid = 4242;
  f.status = ExitStatus{3, 0};
  f.host = "hosta";
  f.timestamp = 102.0;
  s.attempt_ended({f}, 103.0);
  t.restart_count = 1;
  s.attempt_started(t, 104.0);
  s.worker_exited(1, 4343, ExitStatus{3, 0}, 105.0, "", "");
  s.attempt_ended({f}, 106.0);
  s.finished(3, 107.0);
  const auto j = nlohmann::json::parse(s.to_json());
  CHECK(j["status"] == "failed");
  CHECK(j["exit_code"] == 3);
  CHECK(j["restarts"] == 1);
  CHECK(j["run_id"] == "job1");
  CHECK(j["duration_s"] == 7.0);
  CHECK(j["started_at"] == "1970-01-01T00:01:40.000Z");
  CHECK(j["root_cause"]["rank"] == 1);
  CHECK(j["root_cause"]["exit_code"] == 3);
  REQUIRE(j["attempts"].size() == 2);
  const auto& first = j["attempts"][0];
  CHECK(first["duration_s"] == 2.0);
  CHECK(first["workers"][0]["error_file"] == "/logs/1/error.json");
  CHECK(first["workers"][1]["signal"] == "SIGTERM");
  CHECK(first["workers"][1]["exit_code"].is_null());
}

TEST_CASE("the job summary names another node's failure as the root cause") {
  JobSummary s("hosta", "train.py", {}, 0.0);
  s.attempt_started(Topology{}, 1.0);
  s.worker_exited(0, 10, ExitStatus{0, 15}, 2.0, "", "");
  rendezvous::Stop stop;
  stop.cause = rendezvous::StopCause::worker_failed;
  stop.reason = "worker 3 on hostb failed";
  stop.exit_code = 9;
  stop.failure = rendezvous::FailureReport{"hostb", 3, 1, 9, ""};
  s.stopped(stop);
  s.attempt_ended({}, 3.0);
  s.finished(9, 4.0);
  const auto j = nlohmann::json::parse(s.to_json());
  CHECK(j["status"] == "failed");
  CHECK(j["reason"] == "worker 3 on hostb failed");
  CHECK(j["root_cause"]["host"] == "hostb");
  CHECK(j["root_cause"]["rank"] == 3);
}

TEST_CASE("the job's failures as the rendezvous listed them: this node's with its log files") {
  JobSummary s("hosta", "train.py", {}, 0.0);
  s.set_log_dir("/logs/job_1");
  s.attempt_started(Topology{}, 1.0);
  s.worker_exited(0, 10, ExitStatus{1, 0}, 2.0, "", "", "/logs/job_1/attempt_0/0/stdout.log",
                  "/logs/job_1/attempt_0/0/stderr.log");
  ProcessFailure own;
  own.host = "hosta";
  own.pid = 10;
  own.status = ExitStatus{1, 0};
  own.stderr_log = "/logs/job_1/attempt_0/0/stderr.log";
  own.stderr_tail = "ValueError: bad";
  rendezvous::Stop stop;
  stop.cause = rendezvous::StopCause::worker_failed;
  stop.failures.push_back(rendezvous::WorkerFailure{});
  stop.failures[0].host = "hosta";
  stop.failures[0].rank = 0;
  stop.failures[0].pid = 10;
  stop.failures[0].exit_code = 1;
  stop.failures.push_back(stop.failures[0]);
  stop.failures[1].host = "hostb";
  s.stopped(stop);
  s.attempt_ended({own}, 3.0);
  s.finished(1, 4.0);
  const auto j = nlohmann::json::parse(s.to_json());
  CHECK(j["log_dir"] == "/logs/job_1");
  CHECK(j["root_cause"]["stderr_tail"] == "ValueError: bad");
  CHECK(j["failures"][0]["stderr_log"] == "/logs/job_1/attempt_0/0/stderr.log");
  CHECK(j["failures"][1]["host"] == "hostb");
  CHECK(j["failures"][1]["stderr_tail"].is_null());
  CHECK(j["attempts"][0]["workers"][0]["stdout_log"] == "/logs/job_1/attempt_0/0/stdout.log");
}

TEST_CASE("the job summary says what went wrong after a worker's script was over") {
  JobSummary s("hosta", "train.py", {}, 0.0);
  s.attempt_started(Topology{}, 1.0);
  s.worker_exited(0, 10, ExitStatus{0, 0}, 2.0, "", "");
  s.worker_exited(1, 11, ExitStatus{0, 0}, 2.0, "", "", "", "",
                  "rank 1's script returned; the interpreter aborted in teardown (SIGABRT)");
  ProcessFailure f;
  f.status = ExitStatus{1, 0};
  f.teardown = "rank 0's script raised an exception; ...";
  s.attempt_ended({f}, 3.0);
  s.finished(1, 4.0);
  const auto j = nlohmann::json::parse(s.to_json());
  CHECK(j["attempts"][0]["workers"][0]["teardown"].is_null());
  CHECK(j["attempts"][0]["workers"][1]["teardown"] ==
        "rank 1's script returned; the interpreter aborted in teardown (SIGABRT)");
  CHECK(j["attempts"][0]["workers"][1]["exit_code"] == 0);
  CHECK(j["root_cause"]["teardown"] == "rank 0's script raised an exception; ...");
  CHECK_THAT(format_failure_summary("train.py", {f}),
             Catch::Contains("  teardown  : rank 0's script raised an exception; ...\n"));
}

TEST_CASE("the job summary of a job that could not start, or succeeded") {
  JobSummary failed("h", "x", {}, 0.0);
  failed.finished(1, 1.0, "cannot bind");
  auto j = nlohmann::json::parse(failed.to_json());
  CHECK(j["status"] == "error");
  CHECK(j["reason"] == "cannot bind");
  CHECK(j["attempts"].empty());
  JobSummary ok("h", "x", {}, 0.0);
  ok.attempt_started(Topology{}, 0.5);
  ok.attempt_ended({}, 0.7);
  ok.finished(0, 1.0);
  j = nlohmann::json::parse(ok.to_json());
  CHECK(j["status"] == "succeeded");
  CHECK(j["root_cause"].is_null());
  CHECK(j["store_refused_connections"] == 0);
  ok.store_refused(3);
  CHECK(nlohmann::json::parse(ok.to_json())["store_refused_connections"] == 3);
}
