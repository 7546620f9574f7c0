#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

namespace trainrun::runtime::testing {

// Example i holds the number i: a loader's batches show which indices a rank was given.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(std::size_t size) : size_(size) {}
  torch::data::Example<> get(std::size_t index) override {
    return {torch::tensor(static_cast<int64_t>(index)), torch::tensor(0)};
  }
  torch::optional<std::size_t> size() const override { return size_; }
  std::size_t size_;
};

}  // namespace trainrun::runtime::testing
