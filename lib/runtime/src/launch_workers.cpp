#include "launch_workers.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <climits>
#include <iterator>
#include <map>
#include <optional>
#include <trainrun/runtime/errors.hpp>
#include <vector>

#include "trainrun/launch/agent/agent.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/worker_count.hpp"

namespace trainrun::runtime::detail {
namespace {

std::vector<std::string> own_arguments() {
  const std::string text = read_file("/proc/self/cmdline").value_or("");
  std::vector<std::string> args;
  std::string current;
  for (char c : text) {
    if (c == '\0') {
      args.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) args.push_back(current);
  return args;
}

// The launcher expands ${local_rank}, $local_rank and $$ in worker arguments; doubling every '$'
// makes it hand our own arguments back unchanged.
std::string escape_dollars(const std::string& arg) {
  std::string out;
  for (char c : arg) {
    out += c;
    if (c == '$') out += '$';
  }
  return out;
}

// Sets environment variables for the workers and puts the old values back when done.
class ScopedEnv {
 public:
  void set(const std::string& name, const std::string& value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace(name, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

int launch_workers(int num_workers, int max_failures, const std::string& experiment_name,
                   const std::filesystem::path& storage_path) {
  const std::string exe = self_exe();
  if (exe.empty()) {
    throw RuntimeError(
        "TorchTrainer: cannot find this program's executable (/proc/self/exe) to "
        "start workers from; run it under trainrun instead");
  }
  const std::vector<std::string> args = own_arguments();

  // The launcher's own defaults for a standalone job (signals, timeouts, output), as
  // `trainrun --standalone` runs it; PET_* variables of this process are not consulted, so the
  // job is what the code asked for. (A braced LaunchConfig{} temporary here draws GCC 12's false
  // -Wmaybe-uninitialized on its optionals.)
  launch::LaunchConfig config = launch::standalone_job(launch::LaunchConfig());
  config.nproc_per_node = num_workers;
  config.nproc_per_node.source = "ScalingConfig::num_workers=" + std::to_string(num_workers);
  config.max_restarts = max_failures < 0 ? INT_MAX : max_failures;
  config.entry_mode = launch::EntryMode::executable;
  config.no_python = true;
  config.entrypoint = exe;
  config.entry_args.clear();
  for (std::size_t i = 1; i < args.size(); ++i)
    config.entry_args.push_back(escape_dollars(args[i]));

  ScopedEnv env;
  env.set("TRAINRUN_EXPERIMENT_NAME", experiment_name);
  env.set("TRAINRUN_STORAGE_PATH", storage_path.string());
  try {
    launch::check_machine_limits(config);
    return launch::run_agent(config);
  } catch (const launch::LaunchError& e) {
    // What trainrun's main would print and exit with: here the trainer's result carries it.
    launch::say(e.what());
    return e.exit_code();
  }
}

}  // namespace trainrun::runtime::detail
