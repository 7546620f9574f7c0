#include "trainrun/launch/workers/worker_count.hpp"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "parse_helpers.hpp"
#include "test_support.hpp"

using namespace trainrun::launch;

namespace {
// A fake /sys/class/drm: render nodes with the given PCI vendors, and a card entry to skip.
struct FakeDrm {
  std::string dir;
  explicit FakeDrm(const std::vector<std::string>& vendors)
      : dir(trainrun::test::make_temp_dir("worker_count")) {
    add("card0", "0x8086");
    for (size_t i = 0; i < vendors.size(); ++i)
      add("renderD" + std::to_string(128 + i), vendors[i]);
  }
  void add(const std::string& node, const std::string& vendor) {
    ::mkdir((dir + "/" + node).c_str(), 0755);
    ::mkdir((dir + "/" + node + "/device").c_str(), 0755);
    std::ofstream(dir + "/" + node + "/device/vendor") << vendor << "\n";
  }
};
}  // namespace

TEST_CASE("NVIDIA GPUs are the device nodes, else the driver's entries; no program is run") {
  const std::string dev = trainrun::test::make_temp_dir("nvidia_dev");
  const std::string driver = trainrun::test::make_temp_dir("nvidia_driver");
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia-caps", "null"})
    std::ofstream(dev + "/" + name);
  CHECK(count_nvidia_devices(dev, driver) == 0);
  CHECK(count_nvidia_devices(dev, driver + "/missing") == 0);
  for (const char* gpu : {"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"})
    ::mkdir((driver + "/" + gpu).c_str(), 0755);
  CHECK(count_nvidia_devices(dev, driver) == 3);  // device nodes not made yet
  std::ofstream(dev + "/nvidia1");
  std::ofstream(dev + "/nvidia3");
  CHECK(count_nvidia_devices(dev, driver) == 2);  // a container's two of the machine's GPUs
}

TEST_CASE("Intel XPUs are the render nodes of vendor 0x8086") {
  FakeDrm drm({"0x8086", "0x10de", "0x8086", "0x1002"});
  CHECK(count_intel_xpus(drm.dir, std::nullopt) == 2);
  CHECK(count_intel_xpus(drm.dir + "/missing", std::nullopt) == 0);
  FakeDrm none({"0x10de"});
  CHECK(count_intel_xpus(none.dir, std::nullopt) == 0);
}

TEST_CASE("ZE_AFFINITY_MASK narrows the XPUs; sub-devices count as their device") {
  FakeDrm drm({"0x8086", "0x8086", "0x8086"});
  CHECK(count_intel_xpus(drm.dir, std::string("")) == 3);
  CHECK(count_intel_xpus(drm.dir, std::string("1")) == 1);
  CHECK(count_intel_xpus(drm.dir, std::string("0.0,0.1,2")) == 2);
  CHECK(count_intel_xpus(drm.dir, std::string("0,1,2,3,4")) == 3);
}

TEST_CASE("xpu without an Intel GPU is a usage error naming how it was asked") {
  WorkerCount xpu;
  xpu.kind = WorkerCount::Kind::xpu;
  xpu.source = "--nproc-per-node=xpu";
  // This machine may have one; only without one is the error certain.
  if (count_intel_xpus("/sys/class/drm", std::nullopt) == 0)
    CHECK_THROWS_WITH(resolve_worker_count(xpu),
                      "--nproc-per-node=xpu: no Intel XPU found on this node; use an integer, cpu "
                      "or gpu");
  else
    CHECK(resolve_worker_count(xpu) >= 1);
}

TEST_CASE("a node runs at most the smallest of the protocol's and the machine's process limits") {
  const ProcessLimits none;
  CHECK_NOTHROW(check_worker_bound(65536, none, "--nproc-per-node=65536"));
  CHECK_THROWS_WITH(check_worker_bound(65537, none, "--nproc-per-node=65537"),
                    Catch::Equals("--nproc-per-node=65537: more workers than one node can run: at "
                                  "most 65536 (each worker is a process; the smallest of the "
                                  "rendezvous protocol's 65536)"));
  ProcessLimits small;
  small.pid_max = 32768;
  small.threads_max = 192726;
  small.rlimit_nproc = 4096;
  CHECK_NOTHROW(check_worker_bound(4096, small, "x"));
  CHECK_THROWS_WITH(check_worker_bound(4097, small, "SLURM_CPUS_PER_TASK=4097"),
                    Catch::StartsWith("SLURM_CPUS_PER_TASK=4097: more workers than one node can "
                                      "run: at most 4096") &&
                        Catch::EndsWith("kernel.pid_max 32768, kernel.threads-max 192726 and "
                                        "RLIMIT_NPROC 4096)"));
  ProcessLimits cgroup;
  cgroup.pids_max = 300;
  CHECK_THROWS_WITH(check_worker_bound(301, cgroup, "--nproc-per-node=301"),
                    Catch::EndsWith("at most 300 (each worker is a process; the smallest of the "
                                    "rendezvous protocol's 65536 and the cgroup's pids.max 300)"));
  // This machine's limits are whatever they are, but never a bound of zero.
  CHECK_NOTHROW(check_worker_bound(1, read_process_limits(), "x"));
}

TEST_CASE("a job's worker count is held to the limits it is given, named as it was given") {
  ProcessLimits cgroup;
  cgroup.pids_max = 300;
  const LaunchConfig given = trainrun::test::parse({"--nproc-per-node=301", "x"});
  CHECK_NOTHROW(check_worker_limits(given, ProcessLimits{}));
  CHECK_THROWS_WITH(check_worker_limits(given, cgroup),
                    Catch::StartsWith("--nproc-per-node=301: more workers than one node can run: "
                                      "at most 300 (") &&
                        Catch::EndsWith("the cgroup's pids.max 300)"));
  CHECK_THROWS_WITH(
      check_worker_limits(trainrun::test::parse({"x"}, {{"PET_NPROC_PER_NODE", "301"}}), cgroup),
      Catch::StartsWith("PET_NPROC_PER_NODE=301: more workers"));
  // A count the node has (gpu, cpu) is within its limits; a program's own count is named as such.
  CHECK_NOTHROW(check_worker_limits(trainrun::test::parse({"--nproc-per-node=gpu", "x"}), cgroup));
  LaunchConfig built;
  built.nproc_per_node = 301;
  CHECK_THROWS_WITH(check_worker_limits(built, cgroup),
                    Catch::StartsWith("301 workers per node: more workers than one node can run"));
}

namespace {
// Lowers this process's RLIMIT_NPROC soft limit to `wanted` (or the hard limit, if lower) for the
// scope; raising it back is allowed.
struct LowerNproc {
  rlimit saved{};
  long long limit = 0;
  explicit LowerNproc(rlim_t wanted) {
    REQUIRE(::getrlimit(RLIMIT_NPROC, &saved) == 0);
    rlimit lowered = saved;
    lowered.rlim_cur = std::min(wanted, saved.rlim_max);
    limit = static_cast<long long>(lowered.rlim_cur);
    REQUIRE(::setrlimit(RLIMIT_NPROC, &lowered) == 0);
  }
  ~LowerNproc() { ::setrlimit(RLIMIT_NPROC, &saved); }
};
}  // namespace

TEST_CASE(
    "parsing reads no limit of the machine: check_machine_limits does, as a step of its own") {
  LaunchConfig c;
  {
    const LowerNproc lowered(40);
    const long long limit = lowered.limit;
    const std::string given = "--nproc-per-node=" + std::to_string(limit + 1);
    c = trainrun::test::parse({given, "x"});
    CHECK_THROWS_WITH(check_machine_limits(c),
                      Catch::StartsWith(given + ": more workers than one node can run: at most " +
                                        std::to_string(limit) + " (") &&
                          Catch::EndsWith("RLIMIT_NPROC " + std::to_string(limit) + ")"));
  }
  // The same configuration, the machine's limit back as it was.
  CHECK_NOTHROW(check_machine_limits(c));
}

TEST_CASE("a worker that cannot be forked for want of processes is named with the limits") {
  ProcessLimits limits;
  limits.pids_max = 8;
  limits.pids_max_file = "/sys/fs/cgroup/job/pids.max";
  limits.rlimit_nproc = 4096;
  CHECK(fork_failure(5, EAGAIN, limits) ==
        "cannot start worker 5: Resource temporarily unavailable: processes here are limited by "
        "the cgroup's pids.max 8 (/sys/fs/cgroup/job/pids.max) and RLIMIT_NPROC 4096 (ulimit "
        "-u); start fewer workers or raise the limit");
  CHECK(fork_failure(0, EAGAIN, ProcessLimits{}) ==
        "cannot start worker 0: Resource temporarily unavailable: processes here are limited by "
        "kernel.pid_max and kernel.threads-max; start fewer workers or raise the limit");
  CHECK(fork_failure(1, ENOMEM, limits) == "cannot start worker 1: Cannot allocate memory");
}
