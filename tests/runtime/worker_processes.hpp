#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace trainrun::runtime::testing {

struct WorkerRun {
  std::vector<int> exit_codes;       // per rank; 128+N for signal N, -1 when killed on timeout
  std::vector<std::string> outputs;  // per rank, stdout and stderr together
  bool timed_out = false;
};

using trainrun::test::free_port;
using trainrun::test::make_temp_dir;

// Starts `world` copies of `program args...` with the launcher variables torchrun sets (RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...) plus `extra_env`, and
// waits for them. As a launcher does, once one exits non-zero the rest are killed. Their TMPDIR
// is a directory of the test's own, removed when it exits (unless `extra_env` names another).
// world == 0 runs one copy with none of the launcher variables (local mode).
WorkerRun run_workers(const std::string& program, const std::vector<std::string>& args, int world,
                      const std::map<std::string, std::string>& extra_env = {},
                      std::chrono::seconds timeout = std::chrono::seconds(90));

std::string read_file(const std::string& path);

// The standard output of `command` (run by sh); throws when it fails.
std::string command_output(const std::string& command);

// The records of <run_dir>/metrics.jsonl, one JSON object per line.
std::vector<nlohmann::json> metric_lines(const std::string& run_dir);

}  // namespace trainrun::runtime::testing
