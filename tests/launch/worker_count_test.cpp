#include "worker_count.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

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
