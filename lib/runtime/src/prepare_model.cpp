#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <string>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/prepare_model.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "session.hpp"

namespace trainrun::runtime {
namespace detail {
namespace {

// Tensors of one dtype and device, split into flat buckets of at most `cap_bytes` (a tensor
// larger than the cap gets a bucket of its own). Order is kept within each group.
std::vector<std::vector<std::size_t>> make_buckets(const std::vector<torch::Tensor>& tensors,
                                                   std::size_t cap_bytes) {
  std::map<std::tuple<int, int, int>, std::vector<std::size_t>> open;
  std::map<std::tuple<int, int, int>, std::size_t> open_bytes;
  std::vector<std::vector<std::size_t>> buckets;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const auto key =
        std::make_tuple(static_cast<int>(t.scalar_type()), static_cast<int>(t.device().type()),
                        static_cast<int>(t.device().index()));
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
    auto& bucket = open[key];
    if (!bucket.empty() && open_bytes[key] + bytes > cap_bytes) {
      buckets.push_back(std::move(bucket));
      bucket.clear();
      open_bytes[key] = 0;
    }
    bucket.push_back(i);
    open_bytes[key] += bytes;
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.empty()) buckets.push_back(std::move(bucket));
  }
  return buckets;
}

void wait_all(std::vector<c10::intrusive_ptr<c10d::Work>>& works, const char* what) {
  try {
    for (auto& work : works) work->wait();
  } catch (const std::exception& e) {
    throw RuntimeError(std::string(what) + " failed: " + e.what() +
                       "; another worker probably stopped or ran a different collective");
  }
}

// Rank 0's values of `tensors` on every rank, sent in flattened buckets.
void broadcast_from_rank0(const c10::intrusive_ptr<ProcessGroup>& group,
                          const std::vector<torch::Tensor>& tensors, std::size_t cap_bytes) {
  torch::NoGradGuard no_grad;
  const auto buckets = make_buckets(tensors, cap_bytes);
  std::vector<std::vector<torch::Tensor>> flats(buckets.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    std::vector<torch::Tensor> pieces;
    for (std::size_t i : buckets[b]) pieces.push_back(tensors[i].detach().reshape({-1}));
    flats[b] = {torch::cat(pieces)};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    works.push_back(group->broadcast(flats[b], options));
  }
  wait_all(works, "prepare_model: broadcasting rank 0's parameters");
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    std::int64_t offset = 0;
    for (std::size_t i : buckets[b]) {
      auto target = tensors[i];
      const std::int64_t n = target.numel();
      target.detach().copy_(flats[b][0].narrow(0, offset, n).view_as(target));
      offset += n;
    }
  }
}

// After each backward pass, replaces every parameter's gradient by its mean over all ranks.
// The first gradient hook of a pass queues one engine callback, which runs when backward has
// accumulated every gradient; the callback all-reduces the gradients bucket by bucket.
class GradientSynchronizer : public std::enable_shared_from_this<GradientSynchronizer> {
 public:
  GradientSynchronizer(c10::intrusive_ptr<ProcessGroup> group, std::vector<torch::Tensor> params,
                       std::size_t cap_bytes, int world_size)
      : group_(std::move(group)),
        params_(std::move(params)),
        buckets_(make_buckets(params_, cap_bytes)),
        world_size_(world_size) {}

  void attach() {
    std::weak_ptr<GradientSynchronizer> weak = shared_from_this();
    for (auto& param : params_) {
      param.register_hook([weak](const torch::Tensor& grad) {
        if (auto self = weak.lock()) self->on_gradient();
        return grad;
      });
    }
  }

 private:
  void on_gradient() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queued_) return;
    queued_ = true;
    std::weak_ptr<GradientSynchronizer> weak = shared_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([weak] {
      if (auto self = weak.lock()) self->synchronize();
    });
  }

  void synchronize() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queued_ = false;
    }
    torch::NoGradGuard no_grad;
    std::vector<std::vector<torch::Tensor>> flats(buckets_.size());
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      std::vector<torch::Tensor> pieces;
      for (std::size_t i : buckets_[b]) {
        const auto& grad = params_[i].grad();
        // A parameter this rank did not use contributes zeros, as in DDP.
        pieces.push_back(grad.defined() ? grad.reshape({-1})
                                        : torch::zeros_like(params_[i]).reshape({-1}));
      }
      flats[b] = {torch::cat(pieces)};
      works.push_back(group_->allreduce(flats[b]));
    }
    wait_all(works, "gradient all-reduce");
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      flats[b][0].div_(world_size_);
      std::int64_t offset = 0;
      for (std::size_t i : buckets_[b]) {
        auto& param = params_[i];
        const std::int64_t n = param.numel();
        auto mean = flats[b][0].narrow(0, offset, n).view_as(param);
        if (param.grad().defined()) {
          param.mutable_grad().copy_(mean);
        } else {
          param.mutable_grad() = mean.clone();
        }
        offset += n;
      }
    }
  }

  c10::intrusive_ptr<ProcessGroup> group_;
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<std::size_t>> buckets_;
  int world_size_;
  std::mutex mutex_;
  bool queued_ = false;
};

std::mutex synchronizers_mutex;
std::vector<std::shared_ptr<GradientSynchronizer>> synchronizers;

}  // namespace

void clear_gradient_synchronizers() {
  std::lock_guard<std::mutex> lock(synchronizers_mutex);
  synchronizers.clear();
}

void prepare_module(const std::shared_ptr<torch::nn::Module>& module,
                    const PrepareModelOptions& options) {
  if (!module) throw ConfigError("prepare_model: the model is null; pass a constructed module");
  if (options.bucket_cap_mb == 0) {
    throw ConfigError("prepare_model: bucket_cap_mb must be at least 1 (got 0)");
  }
  const TrainContext& context = get_context();
  if (options.move_to_device) module->to(get_device());
  auto group = get_process_group();
  if (!group) return;

  const std::size_t cap_bytes = options.bucket_cap_mb * 1024 * 1024;
  std::vector<torch::Tensor> state = module->parameters();
  for (const auto& buffer : module->buffers()) state.push_back(buffer);
  broadcast_from_rank0(group, state, cap_bytes);

  std::vector<torch::Tensor> trainable;
  for (const auto& param : module->parameters()) {
    if (param.requires_grad()) trainable.push_back(param);
  }
  if (trainable.empty()) return;
  auto synchronizer = std::make_shared<GradientSynchronizer>(group, std::move(trainable), cap_bytes,
                                                             context.world_size());
  synchronizer->attach();
  std::lock_guard<std::mutex> lock(synchronizers_mutex);
  synchronizers.push_back(std::move(synchronizer));
}

}  // namespace detail
}  // namespace trainrun::runtime
