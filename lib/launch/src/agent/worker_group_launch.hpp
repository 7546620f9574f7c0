#pragma once

#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/output/log_dir.hpp"
#include "trainrun/launch/workers/numa_binding.hpp"
#include "trainrun/launch/workers/supervisor.hpp"
#include "trainrun/launch/workers/worker_env.hpp"

namespace trainrun::launch {

// How the agent starts each attempt's worker group: one WorkerLaunch per local rank, in its rank
// directory (made now, an earlier attempt's error file gone), on its --numa-binding CPUs, with
// the output trainrun must read passed through it.
// Whether the workers' stdout should pass through trainrun: trainrun's own is open and not a
// terminal. Whether it was open is read before main, while no descriptor of trainrun's own can
// have taken its number (a closed stdout stays closed for the workers).
bool stdout_passes_through();

class WorkerGroupLaunch {
 public:
  // `capture_stderr`: the workers' stderr goes through trainrun, unchanged, so that a failure
  // can show its last lines; `capture_stdout`: their stdout too, so that their first output is
  // seen wherever it goes (not where trainrun's own is closed: the workers' stays closed). On a
  // terminal each stays the workers' own (colours, progress bars: docs/cli.md).
  WorkerGroupLaunch(const LaunchConfig& config, std::string program, std::string host,
                    bool capture_stderr = ::isatty(STDERR_FILENO) == 0,
                    bool capture_stdout = stdout_passes_through());

  // --numa-binding: each local rank's CPUs, planned once; its warnings and details are said.
  void plan_numa(const std::map<std::string, std::string>& inherited,
                 const std::function<void(const std::string&, Level)>& say);

  // The group of an attempt with `topology`, its rank directories in `logs`. `watched`: under
  // --hang-timeout, every stream passes through trainrun, since any output is progress.
  std::vector<WorkerLaunch> launches(const Topology& topology, const JobSettings& job,
                                     const LogDir& logs,
                                     const std::map<std::string, std::string>& inherited,
                                     bool watched) const;

 private:
  const LaunchConfig& config_;
  std::string program_;
  std::string host_;
  bool capture_stderr_;
  bool capture_stdout_;
  NumaPlan numa_;
};

}  // namespace trainrun::launch
