#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainrun::launch {

// PyTorch's NCCL flight recorder keeps the last collectives of each rank and dumps them when a
// collective times out, to `<prefix><rank>`; trainrun points that prefix into each rank's log
// directory.
inline constexpr char kFlightRecorderPrefix[] = "nccl_trace_rank_";

// The flight recorder's variables for a worker whose log directory is `rank_dir`: the ring
// buffer (TORCH_NCCL_TRACE_BUFFER_SIZE=2000), the dump on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT=1)
// and its file prefix (TORCH_NCCL_DEBUG_INFO_TEMP_FILE=<rank_dir>/nccl_trace_rank_), by the names
// every PyTorch 2.x reads. A setting the user made, under that name or its newer TORCH_FR_ one,
// is left alone.
std::map<std::string, std::string> flight_recorder_variables(
    const std::string& rank_dir, const std::map<std::string, std::string>& inherited);

// The dumps under a run directory's attempt_<k>/<local rank>/ directories, sorted.
std::vector<std::string> flight_recorder_dumps(const std::string& run_dir);

// "NCCL flight recorder dumps (2): PATH, PATH"; empty without dumps.
std::string flight_recorder_line(const std::vector<std::string>& dumps);

}  // namespace trainrun::launch
