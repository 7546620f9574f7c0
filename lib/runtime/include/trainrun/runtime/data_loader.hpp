#pragma once

#include <torch/data/dataloader.h>
#include <torch/data/samplers/distributed.h>
#include <torch/data/samplers/random.h>
#include <torch/data/samplers/sequential.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <utility>

namespace trainrun::runtime {

struct DataLoaderOptions {
  std::size_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;  // drop this rank's last batch when it is short
  std::size_t workers = 0;
  // With N ranks and a dataset size not divisible by N, repeat a few samples so every rank gets
  // the same number (as torch's DistributedSampler); false drops the remainder instead.
  bool pad_shards = true;
};

namespace detail {

// Chooses this rank's indices each epoch: a disjoint 1/N shard (shuffled by epoch when asked)
// when launched, the plain random or sequential order in local mode.
class ShardSampler : public torch::data::samplers::Sampler<> {
 public:
  ShardSampler(std::size_t size, const DataLoaderOptions& options, const TrainContext& context,
               std::shared_ptr<std::size_t> epoch)
      : epoch_(std::move(epoch)) {
    namespace samplers = torch::data::samplers;
    if (context.launched()) {
      const auto replicas = static_cast<std::size_t>(context.world_size());
      const auto rank = static_cast<std::size_t>(context.world_rank());
      if (options.shuffle) {
        distributed_ = std::make_shared<samplers::DistributedRandomSampler>(size, replicas, rank,
                                                                            options.pad_shards);
      } else {
        distributed_ = std::make_shared<samplers::DistributedSequentialSampler>(
            size, replicas, rank, options.pad_shards);
      }
      inner_ = distributed_;
    } else if (options.shuffle) {
      inner_ = std::make_shared<samplers::RandomSampler>(size);
    } else {
      inner_ = std::make_shared<samplers::SequentialSampler>(size);
    }
  }

  void reset(torch::optional<std::size_t> new_size = torch::nullopt) override {
    if (distributed_) distributed_->set_epoch(*epoch_);
    inner_->reset(new_size);
  }
  torch::optional<BatchRequestType> next(std::size_t batch_size) override {
    return inner_->next(batch_size);
  }
  void save(torch::serialize::OutputArchive& archive) const override { inner_->save(archive); }
  void load(torch::serialize::InputArchive& archive) override { inner_->load(archive); }

 private:
  std::shared_ptr<std::size_t> epoch_;
  std::shared_ptr<torch::data::samplers::Sampler<>> inner_;
  std::shared_ptr<torch::data::samplers::DistributedSampler<>> distributed_;
};

}  // namespace detail

// A data loader over this rank's share of a dataset. Iterate it like a LibTorch data loader.
template <typename Dataset>
class DataLoader {
 public:
  using Loader = torch::data::StatelessDataLoader<Dataset, detail::ShardSampler>;

  DataLoader(std::unique_ptr<Loader> loader, std::shared_ptr<std::size_t> epoch)
      : loader_(std::move(loader)), epoch_(std::move(epoch)) {}

  // Reshuffles the shards for `epoch` (launched mode); call before iterating each epoch, so
  // every epoch sees a different order while all ranks stay disjoint.
  void set_epoch(std::size_t epoch) { *epoch_ = epoch; }

  auto begin() { return loader_->begin(); }
  auto end() { return loader_->end(); }
  Loader& loader() { return *loader_; }

 private:
  std::unique_ptr<Loader> loader_;
  std::shared_ptr<std::size_t> epoch_;
};

// Builds a data loader that gives each rank a disjoint 1/N of every epoch (LibTorch's
// distributed samplers) when launched, and an ordinary data loader in local mode. `dataset`
// must be a sized, stateless LibTorch dataset, usually mapped to batches (e.g. with Stack<>).
template <typename Dataset>
DataLoader<Dataset> prepare_data_loader(Dataset dataset, const DataLoaderOptions& options = {}) {
  if (options.batch_size == 0) {
    throw ConfigError("prepare_data_loader: batch_size must be at least 1 (got 0)");
  }
  const torch::optional<std::size_t> size = dataset.size();
  if (!size) {
    throw ConfigError("prepare_data_loader: the dataset has no size; wrap a sized dataset");
  }
  auto epoch = std::make_shared<std::size_t>(0);
  detail::ShardSampler sampler(*size, options, get_context(), epoch);
  auto loader_options = torch::data::DataLoaderOptions()
                            .batch_size(options.batch_size)
                            .workers(options.workers)
                            .drop_last(options.drop_last);
  auto loader = torch::data::make_data_loader(std::move(dataset), std::move(sampler),
                                              std::move(loader_options));
  return DataLoader<Dataset>(std::move(loader), std::move(epoch));
}

}  // namespace trainrun::runtime
