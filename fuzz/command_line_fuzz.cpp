// The whole command line with PET_* defaults. Input: NUL-separated arguments, then an empty
// string, then NUL-separated NAME=VALUE environment entries.
#include "fuzz_util.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input = trainrun::fuzz::as_view(data, size);
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  bool in_env = false;
  for (auto& part : trainrun::fuzz::split_nul(input)) {
    if (!in_env && part.empty()) {
      in_env = true;
    } else if (!in_env) {
      args.push_back(part);
    } else if (auto eq = part.find('='); eq != std::string::npos) {
      env[part.substr(0, eq)] = part.substr(eq + 1);
    }
  }
  try {
    // A --config file's text is the last environment entry's value: no file is read.
    const std::string config = env.empty() ? "" : env.rbegin()->second;
    ParseOutcome outcome =
        parse_command_line(args, env, [&](const std::string&) { return config; });
    if (outcome.help_text) return 0;
    const LaunchConfig& c = outcome.config;
    FUZZ_CHECK(c.min_nodes >= 1 && c.min_nodes <= c.max_nodes);
    FUZZ_CHECK(c.nproc_per_node.kind != WorkerCount::Kind::number || c.nproc_per_node.number >= 1);
    FUZZ_CHECK(c.node_rank >= 0 && c.max_restarts >= 0);
    FUZZ_CHECK(c.master_port >= 0 && c.master_port <= 65535);
    FUZZ_CHECK(c.shutdown_timeout >= 0 && c.monitor_interval > 0);
    FUZZ_CHECK(!c.entrypoint.empty() && !c.role.empty() && !c.rdzv_id.empty());
    auto argv = worker_argv(c);
    FUZZ_CHECK(!argv.empty());
    for (const auto& a : argv) expand_local_rank(a, 3);
  } catch (const UsageError&) {
  }
  return 0;
}
