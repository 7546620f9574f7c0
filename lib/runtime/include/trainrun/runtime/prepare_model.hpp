#pragma once

#include <torch/nn/module.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <type_traits>

namespace trainrun::runtime {

struct PrepareModelOptions {
  bool move_to_device = true;
  // Gradients are all-reduced in flattened buckets of about this size.
  std::size_t bucket_cap_mb = 25;
  // Rank 0's buffers (BatchNorm running statistics) replace every rank's after each synchronised
  // backward pass, so all ranks hold the same before the next forward (DDP's broadcast_buffers).
  bool broadcast_buffers = true;
};

namespace detail {
void prepare_module(const std::shared_ptr<torch::nn::Module>& module,
                    const PrepareModelOptions& options);
// Pauses the gradient all-reduce of a prepared module; the returned function resumes it.
std::function<void()> pause_gradient_sync(const std::shared_ptr<torch::nn::Module>& module);

template <typename T>
struct is_shared_ptr : std::false_type {};
template <typename T>
struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};

// A module holder (torch::nn::Linear, a TORCH_MODULE type) or a std::shared_ptr to a module, as
// the module it holds.
template <typename Model>
std::shared_ptr<torch::nn::Module> as_module(const Model& model) {
  if constexpr (is_shared_ptr<Model>::value) {
    return std::static_pointer_cast<torch::nn::Module>(model);
  } else {
    return std::static_pointer_cast<torch::nn::Module>(model.ptr());
  }
}
}  // namespace detail

// Makes `model` a data-parallel replica, as Python's DistributedDataParallel does: moves it to
// get_device(), broadcasts parameters and buffers from rank 0, and after every backward pass
// replaces each gradient by its mean over all ranks (bucketed, flattened all-reduce that starts
// while backward still runs). Every rank must run backward the same number of times. In local
// mode it only moves the model. Accepts a module holder (torch::nn::Linear, a TORCH_MODULE type)
// or a std::shared_ptr to a module, and returns the same object.
template <typename Model>
Model prepare_model(Model model, const PrepareModelOptions& options = {}) {
  detail::prepare_module(detail::as_module(model), options);
  return model;
}

// While a NoSync lives, backward passes of its model keep their gradients local (no all-reduce);
// the first backward pass after it averages all that accumulated meanwhile, as DDP's no_sync()
// does: gradient accumulation without a collective per micro-batch. Every rank must use it alike.
// In local mode, or for a model prepare_model did not see, it does nothing.
//   { rt::NoSync no_sync(model); loss(batch0).backward(); }
//   loss(batch1).backward();  // averages the gradients of both batches over all ranks
class NoSync {
 public:
  template <typename Model>
  explicit NoSync(const Model& model)
      : resume_(detail::pause_gradient_sync(detail::as_module(model))) {}
  ~NoSync() { resume_(); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  std::function<void()> resume_;
};

}  // namespace trainrun::runtime
