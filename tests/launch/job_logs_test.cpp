#include "agent/job_logs.hpp"

#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "cli/option_values.hpp"
#include "test_support.hpp"

using namespace trainrun::launch;

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void touch(const std::string& path) { std::ofstream(path) << "line\n"; }

LaunchConfig tee_config(int nproc) {
  LaunchConfig c;
  c.nproc_per_node = nproc;
  c.tee = parse_std_spec("3", "-t");
  return c;
}

}  // namespace

TEST_CASE("a successful job without --log-dir drops the console's copies, and what is empty",
          "[agent]") {
  ::setenv("TMPDIR", trainrun::test::make_temp_dir("job_logs_tmp").c_str(), 1);
  const LaunchConfig c = tee_config(2);
  JobLogs logs(c);
  logs.create("run1");
  REQUIRE(logs.dir().temporary());
  for (int attempt = 0; attempt < 2; ++attempt)
    for (int lr = 0; lr < 2; ++lr) {
      const std::string dir = logs.dir().make_rank_dir(attempt, lr);
      touch(dir + "/stdout.log");
      touch(dir + "/stderr.log");
    }
  CHECK(logs.end(0, 1, true).empty());
  CHECK_FALSE(exists(logs.dir().run_dir()));
  CHECK(logs.kept_line().empty());
  ::unsetenv("TMPDIR");
}

TEST_CASE("a job's log directory stays when the console missed output or the job failed",
          "[agent]") {
  ::setenv("TMPDIR", trainrun::test::make_temp_dir("job_logs_kept").c_str(), 1);
  const LaunchConfig c = tee_config(1);
  SECTION("the console went away: the files hold what it did not show") {
    JobLogs logs(c);
    logs.create("run2");
    touch(logs.dir().make_rank_dir(0, 0) + "/stdout.log");
    CHECK(logs.end(0, 0, false) == logs.dir().run_dir());
    CHECK(logs.kept_line() ==
          "log directory kept: " + logs.dir().run_dir() +
              " (it holds what the console did not show; --log-dir chooses where)");
  }
  SECTION("a failed job keeps everything, and says nothing at exit") {
    JobLogs logs(c);
    logs.create("run3");
    touch(logs.dir().make_rank_dir(0, 0) + "/stdout.log");
    CHECK(logs.end(1, 0, true) == logs.dir().run_dir());
    CHECK(exists(logs.dir().rank_dir(0, 0) + "/stdout.log"));
    CHECK(logs.kept_line().empty());
  }
  ::unsetenv("TMPDIR");
}

TEST_CASE("--log-dir keeps the console's copies; after a summary the directory is named",
          "[agent]") {
  LaunchConfig c = tee_config(1);
  c.log_dir = trainrun::test::make_temp_dir("job_logs_given");
  JobLogs logs(c);
  logs.create("run4");
  CHECK_FALSE(logs.dir().temporary());
  // Nothing written: the empty directory goes, and is not named.
  CHECK(logs.after_summary(0).empty());
  CHECK_FALSE(exists(logs.dir().run_dir()));
  const std::string file = logs.dir().make_rank_dir(0, 0) + "/stdout.log";
  touch(file);
  CHECK(logs.after_summary(0) ==
        std::vector<std::string>{"log directory: " + logs.dir().run_dir()});
  CHECK(logs.end(0, 0, true) == logs.dir().run_dir());
  CHECK(exists(file));
  CHECK(logs.kept_line().empty());
}

TEST_CASE("a temporary log directory that holds only the agent's own files goes", "[agent]") {
  const std::string tmp = trainrun::test::make_temp_dir("job_logs_agent");
  ::setenv("TMPDIR", tmp.c_str(), 1);
  LaunchConfig c;
  c.nproc_per_node = 2;
  SECTION("after a success: the runtime's first-report marks and the heartbeat") {
    JobLogs logs(c);
    logs.create("run5");
    // On disk under $TMPDIR, as torchrun's: never in memory.
    CHECK(logs.dir().run_dir().rfind(tmp + "/trainrun_", 0) == 0);
    for (int attempt = 0; attempt < 2; ++attempt)
      for (int lr = 0; lr < 2; ++lr) {
        logs.dir().make_rank_dir(attempt, lr);
        touch(logs.first_report_path(attempt, lr));
      }
    touch(logs.heartbeat_path());
    CHECK(logs.end(0, 1, true).empty());
    CHECK_FALSE(exists(logs.dir().run_dir()));
    CHECK(logs.kept_line().empty());
  }
  SECTION("after a failure without an error file or a log: nothing to point to") {
    JobLogs logs(c);
    logs.create("run6");
    logs.dir().make_rank_dir(0, 0);
    touch(logs.first_report_path(0, 0));
    CHECK(logs.after_summary(0).empty());
    CHECK(logs.end(1, 0, true).empty());
    CHECK_FALSE(exists(logs.dir().run_dir()));
  }
  SECTION("a failure's error file keeps it, the agent's files gone") {
    JobLogs logs(c);
    logs.create("run7");
    const std::string rank = logs.dir().make_rank_dir(0, 1);
    touch(rank + "/error.json");
    touch(logs.first_report_path(0, 1));
    CHECK(logs.after_summary(0) ==
          std::vector<std::string>{"log directory: " + logs.dir().run_dir()});
    CHECK(logs.end(1, 0, true) == logs.dir().run_dir());
    CHECK(exists(rank + "/error.json"));
    CHECK_FALSE(exists(logs.first_report_path(0, 1)));
  }
  SECTION("--log-dir: nothing written there is removed") {
    c.log_dir = trainrun::test::make_temp_dir("job_logs_given_agent");
    JobLogs logs(c);
    logs.create("run8");
    logs.dir().make_rank_dir(0, 0);
    touch(logs.first_report_path(0, 0));
    CHECK(logs.end(0, 0, true) == logs.dir().run_dir());
    CHECK(exists(logs.first_report_path(0, 0)));
  }
  ::unsetenv("TMPDIR");
}
