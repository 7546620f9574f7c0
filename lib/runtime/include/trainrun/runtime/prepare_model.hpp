#pragma once

#include <torch/nn/module.h>

#include <cstddef>
#include <memory>
#include <type_traits>

namespace trainrun::runtime {

struct PrepareModelOptions {
  bool move_to_device = true;
  // Gradients are all-reduced in flattened buckets of about this size.
  std::size_t bucket_cap_mb = 25;
};

namespace detail {
void prepare_module(const std::shared_ptr<torch::nn::Module>& module,
                    const PrepareModelOptions& options);

template <typename T>
struct is_shared_ptr : std::false_type {};
template <typename T>
struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};
}  // namespace detail

// Makes `model` a data-parallel replica, as Python's DistributedDataParallel does: moves it to
// get_device(), broadcasts parameters and buffers from rank 0, and after every backward pass
// replaces each gradient by its mean over all ranks (bucketed, flattened all-reduce). Every rank
// must run backward the same number of times. In local mode it only moves the model.
// Accepts a module holder (torch::nn::Linear, a TORCH_MODULE type) or a std::shared_ptr to a
// module, and returns the same object.
template <typename Model>
Model prepare_model(Model model, const PrepareModelOptions& options = {}) {
  if constexpr (detail::is_shared_ptr<Model>::value) {
    detail::prepare_module(std::static_pointer_cast<torch::nn::Module>(model), options);
  } else {
    detail::prepare_module(std::static_pointer_cast<torch::nn::Module>(model.ptr()), options);
  }
  return model;
}

}  // namespace trainrun::runtime
