#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "trainrun/stacks/stack.hpp"

namespace trainrun::stacks {

struct CollectOptions {
  // Where py-spy, eu-stack and gdb are looked up, as PATH is ($PATH by default).
  std::string path = default_path();
  // Each tool run is killed (its whole process group) after this long.
  std::chrono::milliseconds timeout{10000};
  // A tool printing more than this is killed: its output so far is kept.
  std::size_t max_output = std::size_t{4} << 20;
  // Set by another thread when the stacks are no longer wanted: the running tool is killed (as
  // on its timeout, and the process sent SIGCONT as then) and no further tool is tried.
  const std::atomic<bool>* stop = nullptr;

  static std::string default_path();
};

// The stack of process `pid`, without stopping it for good. A Python process (its executable is
// python*, or it maps libpython): py-spy with native frames, again without them if that fails.
// Otherwise, or when py-spy is missing or fails: eu-stack, else gdb. Every thread also gets its
// state, wait channel and system call from /proc, read before any tool attaches; with no tool
// that works, that is all (tool "/proc"), and a note says which tool would give more. A process
// that was not stopped before is sent SIGCONT when it is left stopped, and whenever a tool did
// not end by itself (its stop may still be pending, as in a vfork parent's uninterruptible
// sleep). Never throws for what a tool or the process does: a missing process gives a Stack with
// no thread and a note.
Stack collect_stack(pid_t pid, const CollectOptions& options = {});

// collect_stack for each pid, several at a time; the results in the order of `pids`.
std::vector<Stack> collect_stacks(const std::vector<pid_t>& pids,
                                  const CollectOptions& options = {});

}  // namespace trainrun::stacks
