#include "trainrun/launch/workers/cgroup.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace trainrun::launch;

TEST_CASE("a process's cgroup is found in cgroup v2 and in cgroup v1's pids hierarchy") {
  const std::string proc_cgroup =
      "9:name=systemd:/\n8:pids:/job/step\n4:cpu,cpuacct:/other\n0::/user.slice/app\n";
  const std::string mountinfo =
      "30 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
      "31 25 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
      "32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n";
  const auto v2 = find_cgroup_directory(proc_cgroup, mountinfo, "");
  REQUIRE(v2);
  CHECK(v2->path() == "/sys/fs/cgroup/unified/user.slice/app");
  const auto pids = find_cgroup_directory(proc_cgroup, mountinfo, "pids");
  REQUIRE(pids);
  CHECK(pids->mount_point == "/sys/fs/cgroup/pids");
  CHECK(pids->relative == "/job/step");
  const auto cpu = find_cgroup_directory(proc_cgroup, mountinfo, "cpu");
  REQUIRE(cpu);
  CHECK(cpu->path() == "/sys/fs/cgroup/cpu,cpuacct/other");
  CHECK_FALSE(find_cgroup_directory(proc_cgroup, mountinfo, "memory"));
  // A container's cgroup namespace: the mount's root is the process's own cgroup.
  const auto inside = find_cgroup_directory(
      "0::/pod/box\n", "40 1 0:30 /pod/box /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n", "");
  REQUIRE(inside);
  CHECK(inside->path() == "/sys/fs/cgroup");
  CHECK(inside->relative.empty());
}
