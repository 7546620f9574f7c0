#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/base/process.hpp"
#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

class Watchdog;

// --preload needs Python workers: throws UsageError when `resolved` (resolve_entrypoint's config)
// runs its entrypoint itself (--no-python, an executable file).
void check_preload(const LaunchConfig& resolved);

// Warm starts (--preload): one Python interpreter per node, the template, imports the modules
// once; each worker is then forked from it instead of starting an interpreter of its own. The
// template carries out the worker's SpawnRequest as spawn() would (argv, environment, working
// directory, streams, session, cgroup, CPUs, descriptor limit, death signal, signals) and runs the
// script as `python script.py` would. The worker is forked by a child of the template that exits
// at once, so it is re-parented to this process (a child subreaper) and reaped as any worker.
// The template forks only while it has one thread and no CUDA context. A module after the first
// that breaks this is named once, and the workers are forked from the template as it was before
// it (a fork of itself it kept waiting), each importing the rest itself; where the first does,
// and whenever the template is not ready, workers are spawned the ordinary way.
class WarmStart {
 public:
  // `say`: one of trainrun's own lines.
  WarmStart(std::vector<std::string> modules, Watchdog& watchdog,
            std::function<void(const std::string&)> say);
  ~WarmStart();
  WarmStart(const WarmStart&) = delete;
  WarmStart& operator=(const WarmStart&) = delete;

  // Before a group starts: `shared` is a worker's request with the environment every worker of
  // the group shares (shared_environment) and the job's marker. Starts the template when there is
  // none (again after it died) and waits up to `wait` for its imports; a template that takes
  // longer is waited for by the next group.
  void prepare(const SpawnRequest& shared,
               std::chrono::milliseconds wait = std::chrono::seconds(10));
  // `request` forked from the template; nullopt: spawn it the ordinary way. A child with pid -1
  // when the fork failed (its errno in `error`). Throws SpawnError when the template ended while
  // forking (a worker may have been started: the group must not be started again beside it).
  std::optional<Child> start(const SpawnRequest& request, int local_rank);
  // Whether `pid` is the template's: it has ended with `status` (reaped by the caller), which is
  // said; the next group starts another.
  bool ended(pid_t pid, const ExitStatus& status);
  // The template's pid; -1 when none runs.
  pid_t pid() const { return pid_; }

 private:
  bool read_reply(char& tag, std::string& text);
  void stop();

  std::vector<std::string> modules_;
  Watchdog& watchdog_;
  std::function<void(const std::string&)> say_;
  pid_t pid_ = -1;
  int socket_ = -1;
  bool ready_ = false;
  bool off_ = false;  // not safe to fork, or no subreaper: every group starts the ordinary way
  std::vector<std::string> options_;  // the interpreter and its options, as in every worker's argv
  std::string program_;
};

}  // namespace trainrun::launch
