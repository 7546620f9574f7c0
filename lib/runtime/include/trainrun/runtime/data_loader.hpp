#pragma once

#include <torch/data/dataloader.h>
#include <torch/data/example.h>
#include <torch/data/iterator.h>
#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/distributed_sampler.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <utility>
#include <vector>

namespace trainrun::runtime {

struct DataLoaderOptions {
  std::size_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;  // drop this rank's last batch when it is short (DataLoader's drop_last)
  std::size_t workers = 0;
  // With N ranks and a dataset size not divisible by N, repeat a few samples so every rank gets
  // the same number (DistributedSampler's default); false drops the remainder instead
  // (DistributedSampler's drop_last=True).
  bool pad_shards = true;
  // The shuffle's seed, the same on every rank (DistributedSampler's seed).
  std::uint64_t seed = 0;
  // Moves each batch's tensors to get_device() (Ray's move_to_device).
  bool move_to_device = true;
};

namespace detail {

// Gives this rank's indices of each epoch, exactly as torch.utils.data.DistributedSampler with
// num_replicas = world size (1 in local mode), so that a Python twin sees the same samples.
class ShardSampler : public torch::data::samplers::Sampler<> {
 public:
  ShardSampler(ShardSpec spec, std::shared_ptr<std::size_t> epoch)
      : spec_(spec), epoch_(std::move(epoch)) {}

  void reset(torch::optional<std::size_t> new_size = torch::nullopt) override {
    if (new_size) spec_.size = *new_size;
    spec_.epoch = *epoch_;
    indices_ = distributed_sampler_indices(spec_);
    next_ = 0;
  }
  torch::optional<BatchRequestType> next(std::size_t batch_size) override {
    if (next_ >= indices_.size()) return torch::nullopt;
    const std::size_t end = std::min(indices_.size(), next_ + batch_size);
    BatchRequestType batch(indices_.begin() + static_cast<std::ptrdiff_t>(next_),
                           indices_.begin() + static_cast<std::ptrdiff_t>(end));
    next_ = end;
    return batch;
  }
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("epoch", torch::tensor(static_cast<std::int64_t>(spec_.epoch)),
                  /*is_buffer=*/true);
    archive.write("next", torch::tensor(static_cast<std::int64_t>(next_)), /*is_buffer=*/true);
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor epoch = torch::empty(1, torch::kInt64);
    torch::Tensor next = torch::empty(1, torch::kInt64);
    archive.read("epoch", epoch, /*is_buffer=*/true);
    archive.read("next", next, /*is_buffer=*/true);
    *epoch_ = static_cast<std::size_t>(epoch.item<std::int64_t>());
    reset();
    next_ = static_cast<std::size_t>(next.item<std::int64_t>());
  }

 private:
  ShardSpec spec_;
  std::shared_ptr<std::size_t> epoch_;
  std::vector<std::size_t> indices_;
  std::size_t next_ = 0;
};

// A batch with its tensors on `device`: tensors, Examples and vectors of them; anything else
// unchanged.
inline torch::Tensor to_device(torch::Tensor tensor, const torch::Device& device) {
  return tensor.defined() ? tensor.to(device) : tensor;
}
template <typename T>
T to_device(T value, const torch::Device& /*device*/) {
  return value;
}
template <typename Data, typename Target>
torch::data::Example<Data, Target> to_device(torch::data::Example<Data, Target> example,
                                             const torch::Device& device) {
  example.data = to_device(std::move(example.data), device);
  example.target = to_device(std::move(example.target), device);
  return example;
}
template <typename Data>
torch::data::Example<Data, torch::data::example::NoTarget> to_device(
    torch::data::Example<Data, torch::data::example::NoTarget> example,
    const torch::Device& device) {
  example.data = to_device(std::move(example.data), device);
  return example;
}
template <typename T>
std::vector<T> to_device(std::vector<T> values, const torch::Device& device) {
  for (auto& value : values) value = to_device(std::move(value), device);
  return values;
}

// LibTorch's batch iterator, with each batch moved to the device the first time it is read.
template <typename Batch>
class DeviceIterator {
 public:
  DeviceIterator(torch::data::Iterator<Batch> inner, torch::optional<torch::Device> device)
      : inner_(std::move(inner)), device_(device) {}
  Batch& operator*() {
    Batch& batch = *inner_;
    if (device_ && !moved_) {
      batch = to_device(std::move(batch), *device_);
      moved_ = true;
    }
    return batch;
  }
  Batch* operator->() { return &**this; }
  DeviceIterator& operator++() {
    ++inner_;
    moved_ = false;
    return *this;
  }
  bool operator==(const DeviceIterator& other) const { return inner_ == other.inner_; }
  bool operator!=(const DeviceIterator& other) const { return !(*this == other); }

 private:
  torch::data::Iterator<Batch> inner_;
  torch::optional<torch::Device> device_;
  bool moved_ = false;
};

}  // namespace detail

// A data loader over this rank's share of a dataset. Iterate it like a LibTorch data loader.
template <typename Dataset>
class DataLoader {
 public:
  using Loader = torch::data::StatelessDataLoader<Dataset, detail::ShardSampler>;
  using Batch = typename Loader::BatchType;

  DataLoader(std::unique_ptr<Loader> loader, std::shared_ptr<std::size_t> epoch,
             torch::optional<torch::Device> device)
      : loader_(std::move(loader)), epoch_(std::move(epoch)), device_(device) {}

  // Reshuffles for `epoch` (DistributedSampler's set_epoch); call before iterating each epoch,
  // so every epoch sees a different order while all ranks stay disjoint.
  void set_epoch(std::size_t epoch) { *epoch_ = epoch; }

  detail::DeviceIterator<Batch> begin() { return {loader_->begin(), device_}; }
  detail::DeviceIterator<Batch> end() { return {loader_->end(), device_}; }
  Loader& loader() { return *loader_; }

 private:
  std::unique_ptr<Loader> loader_;
  std::shared_ptr<std::size_t> epoch_;
  torch::optional<torch::Device> device_;
};

// Builds a data loader whose sampler is torch's DistributedSampler over the world (each rank a
// disjoint 1/N of every epoch, the same indices in the same order as Python's), and which moves
// batches to get_device(). `dataset` must be a sized, stateless LibTorch dataset, usually mapped
// to batches (e.g. with Stack<>).
template <typename Dataset>
DataLoader<Dataset> prepare_data_loader(Dataset dataset, const DataLoaderOptions& options = {}) {
  if (options.batch_size == 0) {
    throw ConfigError("prepare_data_loader: batch_size must be at least 1 (got 0)");
  }
  const torch::optional<std::size_t> size = dataset.size();
  if (!size) {
    throw ConfigError("prepare_data_loader: the dataset has no size; wrap a sized dataset");
  }
  const TrainContext& context = get_context();
  ShardSpec spec;
  spec.size = *size;
  spec.replicas = static_cast<std::size_t>(context.world_size());
  spec.rank = static_cast<std::size_t>(context.world_rank());
  spec.shuffle = options.shuffle;
  spec.seed = options.seed;
  spec.drop_last = !options.pad_shards;
  auto epoch = std::make_shared<std::size_t>(0);
  auto loader_options = torch::data::DataLoaderOptions()
                            .batch_size(options.batch_size)
                            .workers(options.workers)
                            .drop_last(options.drop_last);
  auto loader = torch::data::make_data_loader(std::move(dataset), detail::ShardSampler(spec, epoch),
                                              std::move(loader_options));
  torch::optional<torch::Device> device;
  if (options.move_to_device) device = get_device();
  return DataLoader<Dataset>(std::move(loader), std::move(epoch), device);
}

}  // namespace trainrun::runtime
