#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
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

#include "gradient_buckets.hpp"
#include "session.hpp"

namespace trainrun::runtime {
namespace detail {
namespace {

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
  const auto buckets = make_buckets(tensors, cap_bytes, cap_bytes);
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

// After each backward pass, replaces every parameter's gradient by its mean over all ranks, as
// DDP's reducer does: a hook after each parameter's gradient accumulation copies the gradient
// into its bucket (GradientBuckets), and a bucket whose gradients are all there starts its
// all-reduce at once, while backward goes on computing the earlier layers. A callback at
// the end of backward starts what is left (parameters this pass did not reach contribute their
// current gradient, or zeros), waits, writes the means back to the parameters some rank used
// (DDP with find_unused_parameters) and broadcasts rank 0's buffers.
class GradientSynchronizer : public std::enable_shared_from_this<GradientSynchronizer> {
 public:
  GradientSynchronizer(c10::intrusive_ptr<ProcessGroup> group, std::vector<torch::Tensor> params,
                       std::vector<torch::Tensor> buffers, std::size_t cap_bytes, int world_size)
      : group_(std::move(group)),
        params_(std::move(params)),
        buffers_(std::move(buffers)),
        cap_bytes_(cap_bytes),
        world_size_(world_size),
        buckets_(params_, cap_bytes) {
    used_.assign(params_.size(), false);
  }

  // While paused (no_sync), backward passes leave gradients local; the first pass after the pause
  // all-reduces what has accumulated, as DDP's no_sync().
  void pause(bool paused) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (paused) {
      ++pauses_;
    } else if (pauses_ > 0) {
      --pauses_;
    }
  }

  void attach() {
    std::weak_ptr<GradientSynchronizer> weak = shared_from_this();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      // The accumulator node is held here: a parameter keeps only a weak reference to it, and a
      // new one (without the hook) would be made for the next forward pass.
      auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
      if (!accumulator) {
        throw ConfigError("prepare_model: a trainable parameter is not a leaf tensor");
      }
      accumulator->add_post_hook(std::make_unique<AccumulatedHook>(weak, i));
      accumulators_.push_back(std::move(accumulator));
      // Moving or converting a parameter (to(device), to(dtype)) gives it a new accumulator
      // without the hook above; this hook stays with the tensor and notices.
      params_[i].register_hook([weak, i](const torch::Tensor& grad) {
        if (auto self = weak.lock()) self->check_accumulator(i);
        return grad;
      });
    }
  }

 private:
  struct AccumulatedHook : torch::autograd::FunctionPostHook {
    AccumulatedHook(std::weak_ptr<GradientSynchronizer> owner, std::size_t index)
        : owner(std::move(owner)), index(index) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& /*inputs*/) override {
      if (auto self = owner.lock()) self->on_accumulated(index);
      return outputs;
    }
    std::weak_ptr<GradientSynchronizer> owner;
    std::size_t index;
  };

  // Runs before parameter i's gradient is accumulated. Loading a state dict can give the
  // parameter a new accumulator of the same dtype and device: the hook moves to it, and
  // synchronisation goes on. A parameter moved or converted (to(device), to(dtype)) no longer
  // fits its bucket: the backward pass fails at once, saying what to do, rather than
  // synchronising silently stopping.
  void check_accumulator(std::size_t i) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto current = torch::autograd::impl::try_get_grad_accumulator(params_[i]);
    if (current == accumulators_[i]) return;
    const auto& bucket = buckets_.flat(buckets_.bucket_of(i));
    if (current && params_[i].dtype() == bucket.dtype() && params_[i].device() == bucket.device()) {
      current->add_post_hook(std::make_unique<AccumulatedHook>(weak_from_this(), i));
      accumulators_[i] = current;
      // LibTorch 1.x runs a hook added now only from the next pass on: this pass, the end of
      // backward picks the accumulated gradient up instead.
      if (in_pass_ && pass_token_.expired()) abandon_pass();
      used_[i] = true;
      if (pauses_ == 0 || in_pass_) begin_pass_if_needed();
      return;
    }
    abandon_pass();
    throw ConfigError(
        "prepare_model: a parameter of a prepared model was moved or converted after "
        "prepare_model (to(device) or to(dtype)), so its gradient would no longer be averaged "
        "across ranks; move or convert the model before prepare_model, or call prepare_model "
        "on it again after moving it");
  }

  // The first hook of a pass queues the end-of-backward callback. A pass whose backward threw
  // never runs it; its callback (and the token it holds) dies with the failed graph, so the
  // next pass sees the expired token (on_accumulated) and starts afresh instead of never
  // synchronising again.
  void begin_pass_if_needed() {
    if (in_pass_) return;
    in_pass_ = true;
    auto token = std::make_shared<char>();
    pass_token_ = token;
    std::weak_ptr<GradientSynchronizer> weak = shared_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([weak, token] {
      if (auto self = weak.lock()) self->finish_pass();
    });
  }

  void on_accumulated(std::size_t i) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (in_pass_ && pass_token_.expired()) abandon_pass();
    used_[i] = true;  // also under no_sync: DDP counts use since the last synchronisation
    if (pauses_ > 0 && !in_pass_) return;
    begin_pass_if_needed();
    if (buckets_.ready(i)) return;
    const auto& grad = params_[i].grad();
    if (grad.is_sparse()) {
      abandon_pass();
      throw ConfigError(
          "prepare_model: sparse gradients are not supported (an embedding with sparse=true?); "
          "use dense gradients");
    }
    try {
      buckets_.mark_ready(i, grad);
      start_ready_buckets();
    } catch (...) {
      abandon_pass();  // backward fails; the next one starts afresh
      throw;
    }
  }

  // Ends a pass that will not finish: all-reduces it started still complete (every rank started
  // the same ones), so their buffers are free before the next pass reuses them.
  void abandon_pass() {
    for (auto& work : buckets_.started()) {
      try {
        work->wait();
      } catch (const std::exception&) {
        // The pass is being discarded; a broken group fails the next collective with its cause.
      }
    }
    reset_pass();
    std::fill(used_.begin(), used_.end(), false);
  }

  void reset_pass() {
    in_pass_ = false;
    pass_token_.reset();
    buckets_.reset();
  }

  void start_ready_buckets() {
    buckets_.start_ready(
        [this](std::vector<torch::Tensor>& flat) { return group_->allreduce(flat); });
  }

  // How many ranks used each parameter since the last synchronisation.
  c10::intrusive_ptr<c10d::Work> count_users(std::vector<torch::Tensor>& counts) {
    auto local = torch::zeros({static_cast<std::int64_t>(params_.size())}, torch::kInt32);
    auto* flags = local.data_ptr<std::int32_t>();
    for (std::size_t i = 0; i < params_.size(); ++i) flags[i] = used_[i] ? 1 : 0;
    counts = {local.to(buckets_.flat(0).device())};
    return group_->allreduce(counts);
  }

  void finish_pass() {
    std::lock_guard<std::mutex> lock(mutex_);
    struct EndPass {
      GradientSynchronizer& self;
      ~EndPass() {
        self.reset_pass();
        std::fill(self.used_.begin(), self.used_.end(), false);
      }
    } end_pass{*this};
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!buckets_.ready(i)) buckets_.mark_ready(i, params_[i].grad());
    }
    start_ready_buckets();
    std::vector<torch::Tensor> counts;
    std::vector<c10::intrusive_ptr<c10d::Work>> works = {count_users(counts)};
    for (auto& work : buckets_.started()) works.push_back(work);
    wait_all(works, "gradient all-reduce");
    const auto users = counts[0].cpu();
    const auto* used_by = users.data_ptr<std::int32_t>();
    buckets_.divide(world_size_);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      // A parameter no rank used keeps its gradient as it was, undefined included, so that
      // momentum, weight decay and Adam leave it alone (as DDP).
      if (used_by[i] == 0) continue;
      auto& param = params_[i];
      if (param.grad().defined()) {
        param.mutable_grad().copy_(buckets_.slot(i));
      } else {
        param.mutable_grad() = buckets_.slot(i).clone();
      }
    }
    // As DDP's broadcast_buffers, once per synchronised pass: every rank continues from rank 0's
    // running statistics.
    if (!buffers_.empty()) broadcast_from_rank0(group_, buffers_, cap_bytes_);
  }

  c10::intrusive_ptr<ProcessGroup> group_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;  // empty unless broadcast_buffers
  std::size_t cap_bytes_;
  int world_size_;
  GradientBuckets buckets_;
  // A shared_ptr in LibTorch 1.x, an intrusive_ptr in later releases.
  using NodePtr =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<NodePtr> accumulators_;
  std::mutex mutex_;
  std::vector<bool> used_;  // reached by backward since the last synchronisation
  std::weak_ptr<char> pass_token_;
  bool in_pass_ = false;
  int pauses_ = 0;
};

std::mutex synchronizers_mutex;
// Each prepared module (by address) and the synchronizer of its gradients.
std::vector<std::pair<const torch::nn::Module*, std::shared_ptr<GradientSynchronizer>>>
    synchronizers;

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
  // Preparing a model again replaces its earlier synchronisation (whose hooks then do nothing),
  // so a model moved after prepare_model can be prepared again.
  {
    std::lock_guard<std::mutex> lock(synchronizers_mutex);
    synchronizers.erase(
        std::remove_if(synchronizers.begin(), synchronizers.end(),
                       [&](const auto& entry) { return entry.first == module.get(); }),
        synchronizers.end());
  }

  const std::size_t cap_bytes = options.bucket_cap_mb * 1024 * 1024;
  const std::vector<torch::Tensor> buffers = module->buffers();
  std::vector<torch::Tensor> state = module->parameters();
  state.insert(state.end(), buffers.begin(), buffers.end());
  broadcast_from_rank0(group, state, cap_bytes);

  std::vector<torch::Tensor> trainable;
  for (const auto& param : module->parameters()) {
    if (param.requires_grad()) trainable.push_back(param);
  }
  if (trainable.empty()) return;
  auto synchronizer = std::make_shared<GradientSynchronizer>(
      group, std::move(trainable),
      options.broadcast_buffers ? buffers : std::vector<torch::Tensor>{}, cap_bytes,
      context.world_size());
  synchronizer->attach();
  std::lock_guard<std::mutex> lock(synchronizers_mutex);
  synchronizers.emplace_back(module.get(), std::move(synchronizer));
}

std::function<void()> pause_gradient_sync(const std::shared_ptr<torch::nn::Module>& module) {
  if (!module) throw ConfigError("no_sync: the model is null");
  std::shared_ptr<GradientSynchronizer> synchronizer;
  {
    std::lock_guard<std::mutex> lock(synchronizers_mutex);
    for (const auto& [prepared, sync] : synchronizers) {
      if (prepared == module.get()) synchronizer = sync;
    }
  }
  // Local mode, or a model prepare_model did not see: there is nothing to pause.
  if (!synchronizer) return [] {};
  synchronizer->pause(true);
  std::weak_ptr<GradientSynchronizer> weak = synchronizer;
  return [weak] {
    if (auto sync = weak.lock()) sync->pause(false);
  };
}

}  // namespace detail
}  // namespace trainrun::runtime
