#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
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
// template is started as local rank 0's worker would be, `python OPTIONS SCRIPT ARGS`, and made
// the template by the Python bootstrap (python_bootstrap.hpp) while the interpreter starts. It
// carries out the worker's SpawnRequest as spawn() would (argv, environment, working
// directory, streams, session, cgroup, CPUs, descriptor limit, death signal, signals) and runs the
// script as the interpreter it started would: Python's own main runs it once the worker
// returns from the bootstrap. The worker is forked by a child of the template that exits
// at once, so it is re-parented to this process (a child subreaper) and reaped as any worker.
// The template forks only while it has one thread and no CUDA context. A module after the first
// that breaks this is named once, and the workers are forked from the template as it was before
// it (a fork of itself it kept waiting), each importing the rest itself; where the first does,
// and whenever the template is not ready, workers are spawned the ordinary way.
// Nothing here waits for the template's imports: its readiness is an event on the loop, which
// goes on meanwhile (the job's store, the rendezvous).
class WarmStart {
 public:
  // `say`: one of trainrun's own lines.
  WarmStart(boost::asio::io_context& io, std::vector<std::string> modules, Watchdog& watchdog,
            std::function<void(const std::string&)> say);
  ~WarmStart();
  WarmStart(const WarmStart&) = delete;
  WarmStart& operator=(const WarmStart&) = delete;

  // Before a group starts: `shared` is a worker's request with the environment every worker of
  // the group shares (shared_environment) and the job's marker. Starts the template when there is
  // none (again after it died); `then` runs once it is ready, or has failed, or `wait` has
  // passed (its workers then start the ordinary way, and the next group finds it ready) — at
  // once where there is nothing to wait for, else later on the loop. `bootstrap_dir`: the Python
  // bootstrap's directory; "" where there is none (said by the caller): workers start the
  // ordinary way.
  void prepare(const SpawnRequest& shared, const std::string& bootstrap_dir,
               std::function<void()> then,
               std::chrono::milliseconds wait = std::chrono::seconds(10));
  // The pending `then` of prepare is dropped: never run. The template goes on importing.
  void cancel() { then_ = nullptr; }
  // Whether a prepare's `then` is still to run.
  bool preparing() const { return static_cast<bool>(then_); }
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
  // Starts the template interpreter; false (said) where it cannot.
  bool launch(const SpawnRequest& shared, const std::string& bootstrap_dir);
  // Its socket became readable: its imports are done, or it ended (its exec failed, say).
  void imported();
  void close_exec_report();
  // The pending `then`, run once.
  void go_on();
  // Kills the template and reaps it: its status, nothing where none ran.
  std::optional<ExitStatus> stop();

  boost::asio::io_context& io_;
  std::vector<std::string> modules_;
  Watchdog& watchdog_;
  std::function<void(const std::string&)> say_;
  pid_t pid_ = -1;
  int socket_ = -1;
  int exec_report_ = -1;  // the template's exec report, read only where it ended unready
  bool ready_ = false;
  bool off_ = false;  // not safe to fork, or no subreaper: every group starts the ordinary way
  std::vector<std::string> options_;  // the interpreter and its options, as in every worker's argv
  // What Python's main runs in each worker forked: the template's own script, or -m and module.
  std::vector<std::string> command_;
  std::string program_;
  boost::asio::steady_timer timer_;  // the wait for the imports
  // The template's socket, watched on the loop while it imports (the descriptor stays ours).
  std::unique_ptr<boost::asio::posix::stream_descriptor> socket_watch_;
  std::function<void()> then_;
  unsigned generation_ = 0;  // a watch of an earlier template is dropped
};

}  // namespace trainrun::launch
