#pragma once

#include <stdexcept>
#include <string>

namespace trainrun::launch {

// Every error the launcher reports to its user, each with the exit status it stands for. Only the
// launcher's two entry points turn one into "trainrun: <what>" on stderr and that exit status:
// trainrun's main, and the runtime's TorchTrainer, which runs the agent in the training
// program's own process (lib/runtime/src/launch_workers.cpp: the status becomes its Result's).
class LaunchError : public std::runtime_error {
 public:
  LaunchError(const std::string& what, int exit_code)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A bad command line or PET_* value, or a worker count the node cannot give (--nproc-per-node=gpu
// without a GPU): exit 2, as usage errors of the shell's tools do.
class UsageError : public LaunchError {
 public:
  explicit UsageError(const std::string& what) : LaunchError(what, 2) {}
};

// The entrypoint cannot be run: the shell's exit codes, 127 not found, 126 not executable.
class EntrypointError : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

// Starting a worker failed before it ran (log file, pipe, fork or exec): exit 1.
class SpawnError : public LaunchError {
 public:
  explicit SpawnError(const std::string& what) : LaunchError(what, 1) {}
};

// The job's own resources cannot be set up (the log directory, MASTER_PORT): exit 1.
class SetupError : public LaunchError {
 public:
  explicit SetupError(const std::string& what) : LaunchError(what, 1) {}
};

}  // namespace trainrun::launch
