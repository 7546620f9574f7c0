#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <trainrun/runtime/checkpoint.hpp>

namespace trainrun::runtime {

// A JSON object of metric name to value: report({{"loss", 0.25}, {"epoch", 3}}).
using Metrics = nlohmann::json;

// Called by every rank after each step or epoch (all ranks the same number of times). Rank 0
// appends `metrics` to <run>/metrics.jsonl and, with a checkpoint, copies rank 0's directory to
// <run>/checkpoint_NNNNNN atomically; other ranks' checkpoints are not persisted. Returns after
// rank 0 has finished, so get_checkpoint() then sees the new checkpoint on every rank.
void report(const Metrics& metrics, const std::optional<Checkpoint>& checkpoint = std::nullopt);

// The most recent persisted checkpoint of this experiment, if any. In a worker started after a
// restart, this is the last checkpoint of the earlier attempt: load it to resume.
std::optional<Checkpoint> get_checkpoint();

}  // namespace trainrun::runtime
