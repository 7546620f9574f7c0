#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/base/process.hpp"
#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

class Watchdog;
class TemplateSocket;

// --preload needs Python workers: throws UsageError when `resolved` (resolve_entrypoint's config)
// runs its entrypoint itself (--no-python, an executable file).
void check_preload(const LaunchConfig& resolved);

// A fork request's outcome (WarmStart::start): the worker (its pid and exec report), a child with
// pid -1 (the fork failed: its errno in `error`), no child (spawn it the ordinary way), or `error`,
// a SpawnError: the template ended, or did not answer within 30 s, while forking (a worker may
// have been started: the group must not be started again beside it).
struct ForkOutcome {
  std::optional<Child> child;
  std::exception_ptr error;
};

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
// Nothing here waits for the template: its readiness, each fork request's reply and the end of
// a template it killed are events on the loop, which goes on meanwhile (the job's store, the
// rendezvous).
class WarmStart {
 public:
  // `say`: one of trainrun's own lines.
  WarmStart(boost::asio::io_context& io, std::vector<std::string> modules, Watchdog& watchdog,
            std::function<void(const std::string&)> say);
  ~WarmStart();
  WarmStart(const WarmStart&) = delete;
  WarmStart& operator=(const WarmStart&) = delete;

  // Before a group starts: `shared` is a worker's request with the environment all its workers
  // share (shared_environment) and the job's marker. Starts the template where none runs; `then`
  // runs once it is ready, or failed, or `wait` passed (its workers then start the ordinary way,
  // the next group finds it ready): at once where there is nothing to wait for, else later on the
  // loop. `bootstrap_dir`: the Python bootstrap's; "" where none (said by the caller): workers
  // start the ordinary way.
  void prepare(const SpawnRequest& shared, const std::string& bootstrap_dir,
               std::function<void()> then,
               std::chrono::milliseconds wait = std::chrono::seconds(10));
  // The pending `then` of prepare is dropped: never run. The template goes on importing.
  void cancel() { then_ = nullptr; }
  // Whether a prepare's `then` is still to run.
  bool preparing() const { return static_cast<bool>(then_); }
  // Asks the template to fork `request`. The outcome now where it is known now (not the
  // template's to carry out, no pipe, the template gone): `done` then never runs. Otherwise
  // nullopt, and `done` runs once, later on the loop, with the template's reply (or its end, or
  // its silence for 30 s). One request at a time.
  std::optional<ForkOutcome> start(const SpawnRequest& request, int local_rank,
                                   std::function<void(ForkOutcome)> done);
  // Whether `pid` is the template's: it ended with `status` (reaped by the caller), which is said;
  // the next group starts another. A fork request out gets its SpawnError, a prepare goes on.
  bool ended(pid_t pid, const ExitStatus& status);
  // The template's pid; -1 when none runs.
  pid_t pid() const { return pid_; }

 private:
  struct Asked {
    int report = -1;  // the worker's exec report, read end
    int local_rank = 0;
    std::function<void(ForkOutcome)> done;
  };
  // Starts the template interpreter; false (said) where it cannot.
  bool launch(const SpawnRequest& shared, const std::string& bootstrap_dir);
  // Its first message came, or its end: its imports are done, or it ended (its exec failed, say).
  void imported(std::optional<std::pair<char, std::string>> message);
  // The reply to the fork request out, or nullopt (the template ended or said nothing in time).
  void answered(std::optional<std::pair<char, std::string>> reply);
  void close_exec_report();
  // The pending `then`, run once.
  void go_on();
  // Kills the template, handed to the reaper: `reaped` runs with its status once the loop reaped
  // it. A fork request still out is dropped (its `done` never runs).
  void stop(std::function<void(const ExitStatus&)> reaped = nullptr);

  boost::asio::io_context& io_;
  std::vector<std::string> modules_;
  Watchdog& watchdog_;
  std::function<void(const std::string&)> say_;
  pid_t pid_ = -1;
  // Its stdin, watched on the loop while it imports and while a fork request is out.
  std::unique_ptr<TemplateSocket> socket_;
  std::optional<Asked> asked_;  // the fork request out
  // Templates killed and not yet reaped: what to do once each is.
  std::map<pid_t, std::function<void(const ExitStatus&)>> dying_;
  int exec_report_ = -1;  // the template's exec report, read only where it ended unready
  bool ready_ = false;
  bool off_ = false;  // not safe to fork, or no subreaper: every group starts the ordinary way
  std::vector<std::string> options_;  // the interpreter and its options, as in every worker's argv
  // What Python's main runs in each worker forked: the template's own script, or -m and module.
  std::vector<std::string> command_;
  std::string program_;
  boost::asio::steady_timer timer_;  // the wait for the imports
  std::function<void()> then_;
};

}  // namespace trainrun::launch
