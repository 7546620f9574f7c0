#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <trainrun/runtime/process_group.hpp>
#include <vector>

namespace trainrun::runtime::detail {

// Tensors of one dtype and device, split into flat buckets of at most `cap_bytes` (the first
// bucket of each dtype and device at most `first_cap_bytes`; a tensor larger than the cap gets a
// bucket of its own). Order is kept within each group.
std::vector<std::vector<std::size_t>> make_buckets(const std::vector<torch::Tensor>& tensors,
                                                   std::size_t cap_bytes,
                                                   std::size_t first_cap_bytes);

// The layout of a model's gradients for all-reduce, as DDP's reducer has it: persistent flat
// buffers (buckets), formed in reverse parameter order (the order backward produces gradients),
// the first one small (1 MiB) so that communication starts early in backward; each parameter's
// gradient has its slot in one. Within a pass: which gradients are in, and which buckets are
// started, strictly in order, so that every rank issues the same collectives in the same
// sequence.
class GradientBuckets {
 public:
  using Work = c10::intrusive_ptr<c10d::Work>;
  // Starts the all-reduce of one bucket's flat buffer.
  using Start = std::function<Work(std::vector<torch::Tensor>& flat)>;

  GradientBuckets(const std::vector<torch::Tensor>& params, std::size_t cap_bytes);

  std::size_t buckets() const { return buckets_.size(); }
  // Parameter i's bucket, and its buffer (the dtype and device the parameter must keep).
  std::size_t bucket_of(std::size_t i) const { return slots_[i].bucket; }
  const torch::Tensor& flat(std::size_t bucket) const { return buckets_[bucket].flat; }
  // Parameter i's place in its bucket, shaped as the parameter.
  torch::Tensor slot(std::size_t i) const;

  // Parameter i's gradient for this pass (zeros when it has none) is in its bucket.
  void mark_ready(std::size_t i, const torch::Tensor& grad);
  bool ready(std::size_t i) const { return ready_[i]; }
  // Starts the buckets whose gradients are all in, in order, up to the first that is not full.
  void start_ready(const Start& start);
  // The all-reduces started this pass.
  std::vector<Work> started() const;
  void divide(int world_size);
  // A new pass: no gradient in, no bucket started.
  void reset();

 private:
  struct Bucket {
    torch::Tensor flat;     // the gradients of its parameters, one after another
    std::size_t size = 0;   // how many parameters
    std::size_t ready = 0;  // how many of them this pass has copied in
    Work work;
  };
  struct Slot {
    std::size_t bucket = 0;
    std::int64_t offset = 0;
    std::vector<std::int64_t> sizes;  // the parameter's shape
  };
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;  // by parameter
  std::vector<bool> ready_;  // copied into its bucket in this pass
  std::size_t next_start_ = 0;
};

}  // namespace trainrun::runtime::detail
