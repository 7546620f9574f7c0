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
  CHECK(logs.after_summary().empty());
  CHECK_FALSE(exists(logs.dir().run_dir()));
  const std::string file = logs.dir().make_rank_dir(0, 0) + "/stdout.log";
  touch(file);
  CHECK(logs.after_summary() == std::vector<std::string>{"log directory: " + logs.dir().run_dir()});
  CHECK(logs.end(0, 0, true) == logs.dir().run_dir());
  CHECK(exists(file));
  CHECK(logs.kept_line().empty());
}
