#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/core/job.hpp"

namespace trainrun::launch {

// PyTorch's NCCL flight recorder keeps the last collectives of each rank and dumps them when a
// collective times out, to `<prefix><rank>`; trainrun points that prefix into each rank's log
// directory.
inline constexpr char kFlightRecorderPrefix[] = "nccl_trace_rank_";

// The flight recorder's variables for a worker whose log directory is `rank_dir`: the ring
// buffer (2000 entries), and with `nccl` the dump on a timeout and its file prefix
// (<rank_dir>/nccl_trace_rank_), which only NCCL's watchdog writes. Without NCCL the buffer alone
// is what the roll call reads (rollcall/collectives.hpp): Gloo records into it too.
// Named as the workers' torch reads them without a warning: TORCH_FR_BUFFER_SIZE,
// TORCH_FR_DUMP_ON_TIMEOUT and TORCH_FR_DUMP_TEMP_FILE from 2.8 (which warns once per process
// about each older name), TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT and
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE before it and where the version is not known. A setting the
// user made, under either name, is left alone.
std::map<std::string, std::string> flight_recorder_variables(
    const std::string& rank_dir, const std::map<std::string, std::string>& inherited,
    const std::optional<TorchVersion>& torch, bool nccl = true);

// The dumps under a run directory's attempt_<k>/<local rank>/ directories, sorted.
std::vector<std::string> flight_recorder_dumps(const std::string& run_dir);

// "NCCL flight recorder dumps (2): PATH, PATH"; empty without dumps.
std::string flight_recorder_line(const std::vector<std::string>& dumps);

}  // namespace trainrun::launch
