#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

Std StdSpec::for_rank(int local_rank) const {
  if (!is_map) return all_ranks;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::none : it->second;
}

}  // namespace trainrun::launch
