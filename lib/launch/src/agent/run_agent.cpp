#include <signal.h>
#include <sys/prctl.h>

#include <optional>

#include "job_summary.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/agent/agent.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"
#include "trainrun/launch/workers/warm_start.hpp"
#include "trainrun/launch/workers/watchdog.hpp"
#include "trainrun/launch/workers/worker_count.hpp"
#include "trainrun/launch/workers/worker_env.hpp"

namespace trainrun::launch {

// The node's process around its job: what the command line left to the machine is resolved, the
// watchdog started and trainrun made the subreaper of the workers' descendants.
int run_agent(const LaunchConfig& config, int launcher_channel) {
  const auto env = current_environment();
  // What the command line left to the node: how many workers it has room for, and the program.
  LaunchConfig counted = config;
  std::optional<ResolvedEntry> resolved;
  try {
    counted.nproc_per_node = resolve_worker_count(config.nproc_per_node);
    if (config.virtual_local_rank) check_virtual_local_rank(counted.nproc_per_node.number, env);
    resolved = resolve_entrypoint(counted, env);
    check_preload(resolved->config);
  } catch (const LaunchError& e) {
    JobSummary summary(host_name(), config.entrypoint, config.entry_args, unix_time());
    write_summary_file(config.summary_file, summary, e.exit_code(), e.what());
    throw;
  }
  const ResolvedEntry& entry = *resolved;
  // Output to a closed pipe must not kill the launcher: it drops console output instead.
  ::signal(SIGPIPE, SIG_IGN);
  Watchdog watchdog;
  if (!watchdog.start())
    say("warning: cannot start the watchdog process; continuing without it", Level::warning);
  // Orphaned descendants of the workers come back to us, to be stopped and reaped. (Set after
  // the watchdog has started, so that it is not one of them.)
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int code;
  try {
    code = run_job(entry.config, entry.program, watchdog, launcher_channel);
  } catch (const LaunchError&) {
    // Nothing of the job was started: the watchdog has nothing to stop.
    watchdog.dismiss();
    throw;
  }
  watchdog.dismiss();
  return code;
}

}  // namespace trainrun::launch
