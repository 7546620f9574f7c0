#include "trainrun/launch/workers/numa_binding.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "test_support.hpp"

using namespace trainrun::launch;

namespace {

void write(const std::string& root, const std::string& path, const std::string& text) {
  std::string dir;
  for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1))
    ::mkdir((root + "/" + path.substr(0, slash)).c_str(), 0755);
  std::ofstream(root + "/" + path) << text << "\n";
}

void add_cpu(const std::string& root, int cpu, int socket, const std::string& siblings,
             const std::string& l3) {
  const std::string dir = "devices/system/cpu/cpu" + std::to_string(cpu);
  write(root, dir + "/topology/physical_package_id", std::to_string(socket));
  write(root, dir + "/topology/thread_siblings_list", siblings);
  write(root, dir + "/cache/index0/type", "Data");
  write(root, dir + "/cache/index0/level", "1");
  write(root, dir + "/cache/index0/shared_cpu_list", std::to_string(cpu));
  write(root, dir + "/cache/index1/type", "Instruction");
  write(root, dir + "/cache/index1/level", "9");
  write(root, dir + "/cache/index1/shared_cpu_list", "0-7");
  write(root, dir + "/cache/index3/type", "Unified");
  write(root, dir + "/cache/index3/level", "3");
  write(root, dir + "/cache/index3/shared_cpu_list", l3);
}

void add_pci(const std::string& root, const std::string& address, const std::string& vendor,
             const std::string& device_class, const std::string& node) {
  const std::string dir = "bus/pci/devices/" + address;
  write(root, dir + "/vendor", vendor);
  write(root, dir + "/class", device_class);
  write(root, dir + "/numa_node", node);
}

// Socket 0: NUMA node 0 (CPUs 0-3: cores {0,1} and {2,3}, each pair sharing an L3) with GPUs 0
// and 1, and node 1 (CPUs 4-5, one L3) with GPU 2; socket 1: node 2 (CPUs 6-7) with GPU 3.
std::string fake_machine() {
  const std::string root = trainrun::test::make_temp_dir("numa");
  write(root, "devices/system/node/possible", "0-2");
  write(root, "devices/system/node/node0/cpulist", "0-3");
  write(root, "devices/system/node/node1/cpulist", "4-5");
  write(root, "devices/system/node/node2/cpulist", "6-7");
  for (int cpu : {0, 1}) add_cpu(root, cpu, 0, "0-1", "0-1");
  for (int cpu : {2, 3}) add_cpu(root, cpu, 0, "2-3", "2-3");
  for (int cpu : {4, 5}) add_cpu(root, cpu, 0, std::to_string(cpu), "4-5");
  for (int cpu : {6, 7}) add_cpu(root, cpu, 1, std::to_string(cpu), "6-7");
  add_pci(root, "0000:00:00.0", "0x8086", "0x060000", "0");   // a bridge
  add_pci(root, "0000:01:00.1", "0x10de", "0x040300", "0");   // a GPU's audio function
  add_pci(root, "0000:81:00.0", "0x10de", "0x030200", "2");   // GPU 3
  add_pci(root, "0000:01:00.0", "0x10de", "0x030200", "0");   // GPU 0
  add_pci(root, "0000:41:00.0", "0x10de", "0x030000", "1");   // GPU 2 (a VGA controller)
  add_pci(root, "0000:02:00.0", "0x10de", "0x030200", "-1");  // GPU 1: node -1 counts as 0
  return root;
}

const std::set<int> kAll = {0, 1, 2, 3, 4, 5, 6, 7};

}  // namespace

TEST_CASE("CPU lists read and write as sysfs writes them", "[numa]") {
  CHECK(parse_cpu_list("0-2,4,6-7\n", "x") == std::set<int>{0, 1, 2, 4, 6, 7});
  CHECK(cpu_list_text({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7");
  CHECK_THROWS_WITH(parse_cpu_list("3-1", "cpulist"),
                    "cpulist: '3-1' is not a CPU list like 0-3,8");
}

TEST_CASE("each mode binds a worker to the CPUs near its GPU, as torchrun's", "[numa]") {
  const std::string root = fake_machine();
  const std::vector<std::string> gpus = visible_gpu_addresses(root, {});
  REQUIRE(gpus ==
          std::vector<std::string>{"0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:81:00.0"});
  auto cpus = [&](const char* mode, int gpu, const std::set<int>& allowed = kAll) {
    return numa_cpus(root, mode, gpu, gpus, allowed);
  };
  CHECK(cpus("node", 0) == std::set<int>{0, 1, 2, 3});
  CHECK(cpus("node", 1) == std::set<int>{0, 1, 2, 3});
  CHECK(cpus("node", 2) == std::set<int>{4, 5});
  CHECK(cpus("node", 0, {0, 2, 5}) == std::set<int>{0, 2});  // only what trainrun may use
  CHECK(cpus("socket", 0) == std::set<int>{0, 1, 2, 3, 4, 5});
  CHECK(cpus("socket", 3) == std::set<int>{6, 7});
  CHECK(cpus("exclusive", 0) == std::set<int>{0, 1});
  CHECK(cpus("exclusive", 1) == std::set<int>{2, 3});
  CHECK(cpus("exclusive", 2) == std::set<int>{4, 5});
  CHECK(cpus("core-complex", 0) == std::set<int>{0, 1});
  CHECK(cpus("core-complex", 1) == std::set<int>{2, 3});
  CHECK(cpus("core-complex", 3) == std::set<int>{6, 7});
  CHECK_THROWS_WITH(cpus("exclusive", 0, {0, 1}), "NUMA node 0 has 1 physical cores for 2 GPUs");
}

TEST_CASE("CUDA_VISIBLE_DEVICES picks and orders the GPUs by index", "[numa]") {
  const std::string root = fake_machine();
  CHECK(visible_gpu_addresses(root, {{"CUDA_VISIBLE_DEVICES", "3,0"}}) ==
        std::vector<std::string>{"0000:81:00.0", "0000:01:00.0"});
  CHECK(visible_gpu_addresses(root, {{"CUDA_VISIBLE_DEVICES", ""}}).empty());
  CHECK_THROWS_WITH(visible_gpu_addresses(root, {{"CUDA_VISIBLE_DEVICES", "GPU-8a1b"}}),
                    "CUDA_VISIBLE_DEVICES=GPU-8a1b names a GPU by 'GPU-8a1b': only indices tell "
                    "its place in sysfs");
}

TEST_CASE("the plan says when it binds nothing, and what it binds", "[numa]") {
  const std::string empty = trainrun::test::make_temp_dir("no-gpu");
  NumaPlan none = plan_numa_binding("node", 2, empty, {}, kAll);
  CHECK(none.cpus == std::vector<std::set<int>>(2));
  CHECK(none.warnings ==
        std::vector<std::string>{"warning: --numa-binding=node does nothing here: no NVIDIA GPU on "
                                 "this node (" +
                                 empty + "/bus/pci/devices); workers run on every CPU"});
  NumaPlan five = plan_numa_binding("socket", 5, fake_machine(), {}, kAll);
  CHECK(five.cpus[3] == std::set<int>{6, 7});
  CHECK(five.cpus[4].empty());
  CHECK(five.warnings ==
        std::vector<std::string>{"warning: --numa-binding=socket: local rank 4 "
                                 "has no GPU of its own (4 GPUs here): not bound"});
  CHECK(five.details[0] == "--numa-binding=socket: local rank 0 (GPU 0000:01:00.0) on CPUs 0-5");
}
