#pragma once

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace trainrun::launch {

// The agent's side of a worker's diagnosis channel (workers/diagnosis.hpp): a request is a line,
// its id (a number, new for each request of this process); the answer is one line, the id, a
// space and a JSON object. An answer to an earlier request, one the agent gave up waiting for
// or cut short for its size, is skipped by its id.
// What a worker answered: {"threads": [{"id", "name", "main", "frames": [[file, line, function],
// innermost first]}], "flight_recorder": the dump of torch's _dump_fr_trace_json (null before
// torch.distributed is imported)}, or why there is no answer.
struct Diagnosis {
  nlohmann::json reply;  // null when `error` says why
  std::string error;
};
// The largest answer read; a larger one is refused (a flight recorder of 2,000 entries is about
// 1 MiB).
inline constexpr std::size_t kMaxDiagnosisBytes = std::size_t{16} << 20;
// Asks the worker on `agent_fd` and waits for its whole answer at most `timeout`. Blocking: for
// a thread that is not the event loop's (the roll call's collector). Never throws.
Diagnosis ask_diagnosis(int agent_fd, std::chrono::milliseconds timeout,
                        std::size_t max_bytes = kMaxDiagnosisBytes);

}  // namespace trainrun::launch
