#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

#include <trainrun/runtime/distributed_sampler.hpp>
#include <trainrun/runtime/errors.hpp>

namespace trainrun::runtime {
namespace {

// torch.randperm(size, generator=torch.Generator().manual_seed(seed)): the same kernel and the
// same mt19937 state, so the same permutation.
std::vector<std::size_t> permutation(std::size_t size, std::uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  const auto perm = at::randperm(static_cast<std::int64_t>(size), generator);
  const auto* values = perm.data_ptr<std::int64_t>();
  return std::vector<std::size_t>(values, values + size);
}

}  // namespace

std::vector<std::size_t> distributed_sampler_indices(const ShardSpec& spec) {
  if (spec.replicas == 0 || spec.rank >= spec.replicas) {
    throw ConfigError("distributed sampler: rank " + std::to_string(spec.rank) +
                      " is not below the number of replicas " + std::to_string(spec.replicas));
  }
  std::vector<std::size_t> indices;
  if (spec.shuffle) {
    indices = permutation(spec.size, spec.seed + spec.epoch);
  } else {
    for (std::size_t i = 0; i < spec.size; ++i) indices.push_back(i);
  }
  // As torch: with drop_last, ceil((n - replicas) / replicas) per rank when n does not divide,
  // which is n / replicas (also 0 for n < replicas); else ceil(n / replicas).
  const std::size_t per_rank =
      spec.drop_last ? spec.size / spec.replicas : (spec.size + spec.replicas - 1) / spec.replicas;
  const std::size_t total = per_rank * spec.replicas;
  if (indices.size() > total) {
    indices.resize(total);
  } else {
    for (std::size_t i = 0; indices.size() < total; ++i) indices.push_back(indices[i]);
  }
  std::vector<std::size_t> shard;
  shard.reserve(per_rank);
  for (std::size_t i = spec.rank; i < total; i += spec.replicas) shard.push_back(indices[i]);
  return shard;
}

}  // namespace trainrun::runtime
