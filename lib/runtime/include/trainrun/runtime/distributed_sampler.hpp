#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainrun::runtime {

// What torch.utils.data.DistributedSampler is constructed with, plus its set_epoch().
struct ShardSpec {
  std::size_t size = 0;      // len(dataset)
  std::size_t replicas = 1;  // num_replicas
  std::size_t rank = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::size_t epoch = 0;
  bool drop_last = false;  // drop the tail that does not divide evenly instead of repeating some
};

// The indices DistributedSampler yields for `spec`, in its order: a permutation from a CPU
// generator seeded with seed + epoch (or 0..size-1), padded by repeating its start (or cut) to a
// multiple of `replicas`, then every replicas-th index from `rank`. So a C++ program and its
// Python twin see the same samples on the same rank.
std::vector<std::size_t> distributed_sampler_indices(const ShardSpec& spec);

}  // namespace trainrun::runtime
