#include "workers/cgroup.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "test_support.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/base/system.hpp"

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

TEST_CASE("a process started with the job's cgroup runs in it, made there or moved there") {
  const std::unique_ptr<JobCgroup> cgroup = JobCgroup::create();
  if (!cgroup) return;  // no cgroup v2 this process may write to: nothing to check here
  const std::string name = cgroup->path().substr(cgroup->path().rfind('/'));
  // A directory that is not a cgroup: the kernel refuses to make a child in it, and the child
  // that fork() makes instead finds no cgroup.procs there; it runs all the same.
  const std::string not_cgroup = trainrun::test::make_temp_dir("not_cgroup");
  const int not_cgroup_fd = ::open(not_cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(not_cgroup_fd >= 0);
  for (const int fd : {cgroup->fd(), not_cgroup_fd}) {
    trainrun::SpawnRequest request;
    request.program = "/bin/cat";
    request.argv = {"cat", "/proc/self/cgroup"};
    request.out = trainrun::Stdio::pipe();
    request.cgroup_fd = fd;
    trainrun::Child child = trainrun::spawn(request);
    REQUIRE(child.pid > 0);
    CHECK(trainrun::wait_for_exec(child) == 0);
    const std::string text = trainrun::read_all(child.out);
    ::close(child.out);
    const auto status = trainrun::wait_for_exit(child.pid);
    REQUIRE(status);
    CHECK(status->code == 0);
    CHECK((text.find(name + "\n") != std::string::npos) == (fd == cgroup->fd()));
  }
  ::close(not_cgroup_fd);
}
