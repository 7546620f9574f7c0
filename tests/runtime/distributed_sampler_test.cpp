// The sampler of prepare_data_loader against torch.utils.data.DistributedSampler itself (Python,
// TRAINRUN_TORCH_PYTHON): the same indices in the same order over a grid of cases.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <trainrun/runtime/data_loader.hpp>
#include <trainrun/runtime/distributed_sampler.hpp>
#include <vector>

#include "index_dataset.hpp"
#include "worker_processes.hpp"

namespace rt = trainrun::runtime;

namespace {

std::string case_name(const rt::ShardSpec& s) {
  std::ostringstream out;
  out << s.size << "," << s.replicas << "," << s.rank << "," << s.shuffle << "," << s.seed << ","
      << s.epoch << "," << s.drop_last;
  return out.str();
}

// Python's indices for each case, by case name.
std::map<std::string, std::vector<std::size_t>> python_indices(
    const std::vector<rt::ShardSpec>& specs) {
  std::string command = std::string(TRAINRUN_TORCH_PYTHON) + " " + TRAINRUN_SAMPLER_REFERENCE;
  for (const auto& spec : specs) command += " " + case_name(spec);
  const std::string output = trainrun::runtime::testing::command_output(command);
  std::map<std::string, std::vector<std::size_t>> result;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    result[record["case"].get<std::string>()] = record["indices"].get<std::vector<std::size_t>>();
  }
  REQUIRE(result.size() == specs.size());
  return result;
}

std::vector<rt::ShardSpec> grid() {
  std::vector<rt::ShardSpec> specs;
  for (std::size_t size : {0, 1, 2, 3, 5, 7, 10, 16, 17, 100, 1001}) {
    for (std::size_t replicas : {1, 2, 3, 4, 8}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          for (std::size_t epoch : {0, 1, 7}) {
            for (std::uint64_t seed : {0, 42}) {
              if (!shuffle && (epoch > 0 || seed > 0)) continue;  // they change nothing then
              for (std::size_t rank = 0; rank < replicas; ++rank) {
                specs.push_back({size, replicas, rank, shuffle, seed, epoch, drop_last});
              }
            }
          }
        }
      }
    }
  }
  specs.push_back({60000, 3, 1, true, 0, 4, false});  // FashionMNIST's size
  return specs;
}

using trainrun::runtime::testing::IndexDataset;

}  // namespace

TEST_CASE("the sampler yields DistributedSampler's indices in its order") {
  const auto specs = grid();
  const auto expected = python_indices(specs);
  std::size_t shuffled_differently = 0;
  for (const auto& spec : specs) {
    INFO("size,replicas,rank,shuffle,seed,epoch,drop_last = " << case_name(spec));
    const auto ours = rt::distributed_sampler_indices(spec);
    CHECK(ours == expected.at(case_name(spec)));
    std::vector<std::size_t> in_order(ours.size());
    for (std::size_t i = 0; i < ours.size(); ++i) in_order[i] = spec.rank + i * spec.replicas;
    if (spec.shuffle && ours != in_order) ++shuffled_differently;
  }
  CHECK(shuffled_differently > 100);  // the grid does exercise the permutation
}

TEST_CASE("prepare_data_loader in local mode: DistributedSampler over one replica, on the device") {
  rt::DataLoaderOptions options;
  options.batch_size = 4;
  options.shuffle = true;
  options.seed = 3;
  auto loader =
      rt::prepare_data_loader(IndexDataset(10).map(torch::data::transforms::Stack<>()), options);
  for (std::size_t epoch : {0, 2}) {
    loader.set_epoch(epoch);
    std::vector<std::size_t> seen;
    for (auto& batch : loader) {
      CHECK(batch.data.device() == rt::get_device());
      for (int64_t i = 0; i < batch.data.size(0); ++i) {
        seen.push_back(static_cast<std::size_t>(batch.data[i].item<int64_t>()));
      }
    }
    const rt::ShardSpec spec{10, 1, 0, true, 3, epoch, false};
    CHECK(seen == python_indices({spec}).at(case_name(spec)));
  }
}
