// Each worker all-reduces a tensor holding rank+1 and checks the sum is W(W+1)/2. Reads the
// variables torchrun and trainrun give their workers; with none of them it runs as world 1.
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Topology {
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  bool launched = false;
};

long parse_int(const char* name, const std::string& value, long min, long max) {
  std::size_t used = 0;
  long parsed = 0;
  try {
    parsed = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || parsed < min || parsed > max) {
    throw std::invalid_argument(std::string(name) + "=" + value + ": expected an integer in [" +
                                std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return parsed;
}

Topology read_topology() {
  const std::vector<std::string> names = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::string missing;
  int present = 0;
  for (const auto& name : names) {
    if (std::getenv(name.c_str()) != nullptr) {
      ++present;
    } else {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  Topology topology;
  if (present == 0) return topology;
  if (!missing.empty()) {
    throw std::invalid_argument("launcher environment is incomplete: " + missing +
                                " not set; run under trainrun/torchrun, or set all of RANK, "
                                "WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or none");
  }
  topology.launched = true;
  topology.world_size = static_cast<int>(
      parse_int("WORLD_SIZE", std::getenv("WORLD_SIZE"), 1, std::numeric_limits<int>::max()));
  topology.rank =
      static_cast<int>(parse_int("RANK", std::getenv("RANK"), 0, topology.world_size - 1));
  topology.master_addr = std::getenv("MASTER_ADDR");
  topology.master_port = static_cast<int>(parse_int("MASTER_PORT", std::getenv("MASTER_PORT"), 1,
                                                    std::numeric_limits<std::uint16_t>::max()));
  return topology;
}

c10::intrusive_ptr<c10d::Store> make_store(const Topology& topology) {
  if (!topology.launched) return c10::make_intrusive<c10d::HashStore>();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(topology.master_port);
  options.isServer = topology.rank == 0;
  options.numWorkers = static_cast<std::size_t>(topology.world_size);
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(300);
  return c10::make_intrusive<c10d::TCPStore>(topology.master_addr, options);
}

int run() {
  const Topology topology = read_topology();
  auto store = make_store(topology);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, topology.rank,
                                                           topology.world_size, options);

  std::vector<at::Tensor> tensors = {torch::full({4}, topology.rank + 1, torch::kInt64)};
  group->allreduce(tensors)->wait();

  const std::int64_t world = topology.world_size;
  const std::int64_t expected = world * (world + 1) / 2;
  const bool ok = torch::all(tensors[0] == expected).item<bool>();
  const std::int64_t sum = tensors[0][0].item<std::int64_t>();
  std::printf("rank %d/%d: all_reduce sum=%lld (expected %lld) %s\n", topology.rank,
              topology.world_size, static_cast<long long>(sum), static_cast<long long>(expected),
              ok ? "ok" : "WRONG");
  std::fflush(stdout);
  // Every rank must finish its collective before rank 0's store goes away.
  group->barrier()->wait();
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::invalid_argument& e) {
    std::cerr << "allreduce_demo: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "allreduce_demo: all-reduce failed: " << e.what() << "\n";
    return 1;
  }
}
