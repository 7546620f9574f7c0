#include <array>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <string>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <utility>

extern char** environ;

namespace trainrun::runtime {
namespace {

const std::array<const char*, 6> kLauncherVariables = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

// The runtime's own strict integer reading: it is built against LibTorch's C++ ABI and does not
// link the launcher's libraries (lib/base's parse_integer) where that ABI differs.
long long parse_integer(const std::string& name, const std::string& value, long long min,
                        long long max) {
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || parsed < min ||
      parsed > max) {
    throw ConfigError("trainrun runtime: " + name + "=" + value + " is not an integer in [" +
                      std::to_string(min) + ", " + std::to_string(max) +
                      "]; check the launcher's environment");
  }
  return parsed;
}

int parse_int(const std::map<std::string, std::string>& env, const std::string& name, long long min,
              long long max) {
  return static_cast<int>(parse_integer(name, env.at(name), min, max));
}

}  // namespace

LaunchEnv parse_launch_env(const std::map<std::string, std::string>& env) {
  std::string missing;
  int present = 0;
  for (const char* name : kLauncherVariables) {
    if (env.count(name) != 0) {
      ++present;
    } else {
      missing += std::string(missing.empty() ? "" : ", ") + name;
    }
  }
  LaunchEnv launch;
  if (const auto it = env.find("TORCHELASTIC_RUN_ID"); it != env.end()) launch.run_id = it->second;
  if (const auto it = env.find("TORCHELASTIC_ERROR_FILE"); it != env.end()) {
    launch.error_file = it->second;
  }
  if (present == 0) return launch;
  if (!missing.empty()) {
    throw ConfigError(
        "trainrun runtime: the launcher environment is incomplete: " + missing +
        " not set; start the program with trainrun or torchrun, or set all of RANK, LOCAL_RANK, "
        "WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or none for local mode");
  }
  constexpr long long kIntMax = std::numeric_limits<int>::max();
  launch.launched = true;
  launch.world_size = parse_int(env, "WORLD_SIZE", 1, kIntMax);
  launch.world_rank = parse_int(env, "RANK", 0, launch.world_size - 1);
  launch.local_world_size = parse_int(env, "LOCAL_WORLD_SIZE", 1, launch.world_size);
  launch.local_rank = parse_int(env, "LOCAL_RANK", 0, launch.local_world_size - 1);
  launch.master_addr = env.at("MASTER_ADDR");
  if (launch.master_addr.empty()) {
    throw ConfigError("trainrun runtime: MASTER_ADDR is empty; it must name the host of rank 0");
  }
  launch.master_port = parse_int(env, "MASTER_PORT", 1, 65535);
  const auto group_rank = env.find("GROUP_RANK");
  if (group_rank != env.end()) {
    launch.node_rank = parse_int(env, "GROUP_RANK", 0, launch.world_size - 1);
  } else {
    launch.node_rank = launch.world_rank / launch.local_world_size;
  }
  if (const auto it = env.find("TORCHELASTIC_USE_AGENT_STORE"); it != env.end()) {
    launch.use_agent_store = it->second == "True";  // torch compares the exact string
  }
  if (env.count("TORCHELASTIC_RESTART_COUNT") != 0) {
    launch.restart_count = parse_int(env, "TORCHELASTIC_RESTART_COUNT", 0, kIntMax);
  }
  if (env.count("TORCHELASTIC_MAX_RESTARTS") != 0) {
    launch.max_restarts = parse_int(env, "TORCHELASTIC_MAX_RESTARTS", 0, kIntMax);
  }
  return launch;
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const auto equals = text.find('=');
    if (equals == std::string::npos) continue;
    env.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return env;
}

TrainContext::TrainContext(LaunchEnv env, std::string experiment_name, bool use_gpu)
    : env_(std::move(env)), experiment_name_(std::move(experiment_name)), use_gpu_(use_gpu) {}

}  // namespace trainrun::runtime
