#include "agent/worker_group_launch.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "agent/agent_plan.hpp"
#include "test_support.hpp"

using namespace trainrun::launch;

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

LaunchConfig config(int nproc) {
  LaunchConfig c;
  c.nproc_per_node = nproc;
  c.entrypoint = "./train";
  c.log_dir = trainrun::test::make_temp_dir("group_launch");
  return c;
}

Topology topology(int nproc, int restart_count) {
  Topology t;
  t.base_rank = 2;
  t.local_world_size = nproc;
  t.world_size = 2 * nproc;
  t.master_addr = "node0";
  t.master_port = 29500;
  t.restart_count = restart_count;
  return t;
}

}  // namespace

TEST_CASE("a group's launches: one per local rank, each in a fresh rank directory", "[agent]") {
  const LaunchConfig c = config(2);
  const LogDir logs = LogDir::create(c.log_dir, "run1");
  // An earlier run of attempt 1 left an error file: it must not stand for this attempt's.
  const std::string stale = error_file_in(logs.make_rank_dir(1, 0));
  std::ofstream(stale) << "{}";
  WorkerGroupLaunch group(c, "/work/train", "node1", false, false);
  const auto launches = group.launches(topology(2, 1), job_settings(c, "run1"), logs, {}, false);
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].local_rank == 0);
  CHECK(launches[1].local_rank == 1);
  CHECK(launches[1].program == "/work/train");
  CHECK(exists(logs.rank_dir(1, 1)));
  CHECK_FALSE(exists(stale));
  for (const auto& w : launches) {
    CHECK(w.cpus.empty());  // no --numa-binding: the CPUs are inherited
    CHECK(w.output.out.route == StreamRoute::inherit);
    CHECK(w.output.err.route == StreamRoute::inherit);
  }
}

TEST_CASE("a group's output passes through trainrun where it must read it", "[agent]") {
  const LaunchConfig c = config(1);
  const LogDir logs = LogDir::create(c.log_dir, "run2");
  const JobSettings job = job_settings(c, "run2");
  SECTION("stderr off a terminal, for a failure's last lines") {
    WorkerGroupLaunch group(c, "/work/train", "node1", true, false);
    const auto w = group.launches(topology(1, 0), job, logs, {}, false).at(0);
    CHECK(w.output.out.route == StreamRoute::inherit);
    CHECK(w.output.err.route == StreamRoute::console);
  }
  SECTION("stdout off a terminal (a file, a pipe), for the first output") {
    WorkerGroupLaunch group(c, "/work/train", "node1", false, true);
    const auto w = group.launches(topology(1, 0), job, logs, {}, false).at(0);
    CHECK(w.output.out.route == StreamRoute::console);
    CHECK(w.output.err.route == StreamRoute::inherit);
  }
  SECTION("every stream under --hang-timeout, where output is progress") {
    WorkerGroupLaunch group(c, "/work/train", "node1", false, false);
    const auto w = group.launches(topology(1, 0), job, logs, {}, true).at(0);
    CHECK(w.output.out.route == StreamRoute::console);
    CHECK(w.output.err.route == StreamRoute::console);
  }
}

TEST_CASE("without --numa-binding nothing is planned or said", "[agent]") {
  const LaunchConfig c = config(1);
  WorkerGroupLaunch group(c, "/work/train", "node1", false, false);
  int said = 0;
  group.plan_numa({}, [&](const std::string&, Level) { ++said; });
  CHECK(said == 0);
}

TEST_CASE("--numa-binding is planned once, its warnings said as warnings", "[agent]") {
  LaunchConfig c = config(2);
  c.numa_binding = "node";
  const std::string no_gpu = trainrun::test::make_temp_dir("group_launch_sysfs");
  WorkerGroupLaunch group(c, "/work/train", "node1", false, false);
  std::vector<std::pair<std::string, Level>> said;
  group.plan_numa({{"TRAINRUN_SYSFS_ROOT", no_gpu}},
                  [&](const std::string& line, Level level) { said.emplace_back(line, level); });
  REQUIRE(said.size() == 1);
  CHECK(said[0].first.find("--numa-binding=node does nothing here") != std::string::npos);
  CHECK(said[0].second == Level::warning);
  const LogDir logs = LogDir::create(c.log_dir, "run3");
  for (const auto& w : group.launches(topology(2, 0), job_settings(c, "run3"), logs, {}, false))
    CHECK(w.cpus.empty());
}
