#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "trainrun/base/off_loop.hpp"
#include "trainrun/stacks/collect.hpp"
#include "trainrun/stacks/stack.hpp"

namespace trainrun::launch {

// Stacks taken off the event loop: the tools (stacks::collect_stacks) run on a thread of the
// collector's own (OffLoop), one collection after another; each result is handed back on the
// loop, which goes on meanwhile. The owner keeps the loop running (a
// pending collection holds no work of its own: a loop's last run does not wait for a tool).
// A worker with a diagnosis channel (workers/diagnosis.hpp) is asked on it first: its flight
// recorder, and its Python traceback of every thread where no tool can read its stack (ptrace
// not allowed).
class StackCollector {
 public:
  struct Target {
    pid_t pid = 0;
    // A duplicate of the agent's end of its diagnosis channel, which the collection closes; -1:
    // none.
    int diagnosis = -1;
  };
  struct Collected {
    std::vector<stacks::Stack> stacks;  // in the order of the targets
    // Each target's flight recorder dump as torch gave it; {"error": why} where it could not be
    // read; null where it has no channel or had no process group yet.
    std::vector<nlohmann::json> recorders;
  };
  using Done = std::function<void(Collected)>;

  StackCollector(boost::asio::io_context& io, stacks::CollectOptions options);
  // Kills the tool that runs (as on its timeout, the process sent SIGCONT), joins the thread, and
  // drops the collections not done: their `done` is never called.
  ~StackCollector();
  StackCollector(const StackCollector&) = delete;
  StackCollector& operator=(const StackCollector&) = delete;

  // The stacks of `targets`, in their order, to `done` on the loop (never from within this call).
  void collect(std::vector<Target> targets, Done done);

 private:
  stacks::CollectOptions options_;
  std::atomic<bool> stop_{false};
  // Last: destroyed first, so that the running collection ends before what it reads goes.
  OffLoop off_loop_;
};

}  // namespace trainrun::launch
