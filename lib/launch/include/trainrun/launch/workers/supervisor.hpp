#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/output/console.hpp"
#include "trainrun/launch/output/group_output.hpp"
#include "trainrun/launch/output/output_plan.hpp"
#include "trainrun/launch/workers/diagnosis.hpp"
#include "trainrun/launch/workers/warm_start.hpp"
#include "trainrun/launch/workers/watchdog.hpp"

namespace trainrun::launch {

class JobCgroup;  // cgroup.hpp, private to the wing

class ExecReports;
class EarlyEvents;

class DiagnosisRelay;
class PythonBootstrap;

// Everything needed to start one worker process.
struct WorkerLaunch {
  int local_rank = 0;
  int rank = 0;         // its global rank, for the launcher's own lines about it
  std::string program;  // path handed to execve (already resolved)
  std::vector<std::string> argv;
  std::vector<std::string> envp;  // "NAME=value"
  OutputPlan output;
  std::string prefix;  // console prefix for tee'd lines
  std::set<int> cpus;  // its CPU affinity (--numa-binding, numa_binding.hpp); empty: inherited
  // A Python worker of torch 2.x: it gets a diagnosis channel (diagnosis.hpp).
  bool diagnosis = false;
};

// A worker that runs, as the roll call asks for it.
struct RunningWorker {
  int local_rank = 0;
  pid_t pid = -1;
  int diagnosis = -1;  // the end to ask its diagnosis channel on (the supervisor's); -1: none
};

// Starts, signals and reaps one node's group of workers. Each worker leads its own process
// group, so a signal to the group also reaches what the worker started; a worker that left its
// group is signalled itself as well. Where the kernel lets us, the job's workers also run in a
// cgroup of their own (see cgroup.hpp), killed whole when the job is killed. Passive: the agent
// calls reap() when SIGCHLD arrives and decides what a worker's end means.
class Supervisor {
 public:
  using ExitHandler = std::function<void(int local_rank, pid_t pid, ExitStatus status)>;
  // A worker with a diagnosis channel told that its script is over; its process goes on.
  using ReturnHandler = std::function<void(int local_rank, pid_t pid, const ScriptReturn& r)>;

  // `preload`: the modules of --preload; each worker is then forked from a template that imported
  // them (warm_start.hpp) where it can be, else spawned.
  Supervisor(boost::asio::io_context& io, Watchdog& watchdog, Console& out, Console& err,
             std::vector<std::string> preload = {});
  ~Supervisor();

  // Readies what starting `workers` needs (the --preload template's imports) and runs `then`:
  // at once when nothing is to wait for, else later on the loop, which goes on meanwhile.
  void prepare(const std::vector<WorkerLaunch>& workers, std::function<void()> then);
  // A prepare's `then` not yet run is dropped: the group is not to start.
  void cancel_prepare();
  // Starts every worker: forks them all in one pass (a chain on the loop where a worker's pid is
  // the --preload template's reply, an event), then reads their exec reports as events on the
  // loop; `started` runs once every worker runs its program (nullptr), or with the error once a
  // start failed and the workers already started are killed and reaped (by the loop, never
  // waited for): a SpawnError for a worker that cannot be forked or a --preload template that
  // ended while forking. No exit reaches `on_exit` before `started` has run. A signal sent while
  // the group is being forked reaches the workers forked after it too.
  void start(const std::vector<WorkerLaunch>& workers, ExitHandler on_exit,
             std::function<void(std::exception_ptr)> started);
  // SIGCHLD: collects every child that has an event through the one reaper (reaper.hpp): the
  // workers and the template, adopted as they start, and the orphans that come back to us;
  // children their starters wait for (the stack tools) are left to them. Call it from the loop's
  // thread, which starts the workers. A worker that stops (SIGSTOP, or job control on a terminal
  // it made its own) is named on the console once per stop: nothing else would say why it waits.
  void reap();
  // Called on the loop when a running worker's script is over (ScriptReturn), once per worker.
  void set_script_returned(ReturnHandler returned) { returned_ = std::move(returned); }
  // Called whenever a worker's output arrives (streams that pass through trainrun).
  void set_progress(std::function<void()> progress) { output_.set_progress(std::move(progress)); }
  // Called once per worker of a group when its first output arrives (streams through trainrun).
  void set_first_output(std::function<void(int local_rank)> first) {
    output_.set_first_output(std::move(first));
  }
  // Sends `sig` to the process group of every worker still running, and to the worker itself
  // where it has left that group. SIGKILL also kills everything in the job's cgroup.
  void signal_all(int sig);
  // Sends `sig` to the process group of running worker `local_rank` whose process is `pid`, and
  // to the worker itself where it has left that group; false when no such worker runs.
  bool signal_one(int local_rank, pid_t pid, int sig);
  // Sends `sig` to each running worker process alone, not to what it started.
  void signal_workers(int sig);
  // SIGABRT to each running worker process alone, for the tracebacks faulthandler writes on it,
  // with its core file size limit set to 0 first: a deliberate stop of a hung job must not write
  // a core file per rank (one as large as the rank's memory) wherever `ulimit -c` allows them.
  void abort_workers();
  size_t running() const;
  // (local rank, pid) of each worker still running.
  std::vector<RunningWorker> running_workers() const;
  // The running attempt's workers: local rank, when its start returned (its pid known).
  std::map<int, std::chrono::steady_clock::time_point> started() const;
  // The local rank of the running worker whose process is `pid`, or whose process group holds it.
  std::optional<int> local_rank_of(pid_t pid) const;
  // After every worker has ended: stops what they left behind (the rest of their process groups,
  // orphans re-parented to us, whatever is in the job's cgroup) with SIGTERM, then SIGKILL after
  // `grace` seconds, and waits for
  // the tee'd output to drain (read to the end, into the log files and the console's queue,
  // however full that queue is). Calls `done` when nothing of this group is left.
  void finish(double grace, std::function<void()> done);
  // The last lines of the stderr of the last group's worker `local_rank` ("" when its stderr did
  // not pass through trainrun); whole once finish() is done.
  std::string stderr_tail(int local_rank) const;

 private:
  struct Worker {
    int local_rank = 0;
    int rank = 0;
    pid_t pid = -1;
    bool running = false;
    bool stop_named = false;  // its current job-control stop was named; a SIGCONT clears it
    std::shared_ptr<DiagnosisRelay> diagnosis;      // its diagnosis channel, read here; null: none
    std::chrono::steady_clock::time_point started;  // its fork (or the template's) returned
    bool returned = false;                          // it told that its script is over
  };
  // A worker being forked: what its fork needs until it is known (the template's reply).
  struct Forking {
    GroupOutput::Streams streams;
    SpawnRequest request;
    std::optional<DiagnosisChannel> channel;
  };
  enum class Signalled { group, process, abort };
  // Forks the group's next workers until one waits for the template's reply, or all are forked.
  void fork_next();
  // Forks launches_[next_]; false when its pid comes later (forked() then), or the start failed.
  bool fork_one();
  // launches_[next_] was forked (or could not be): it is known from now on.
  void forked(ForkOutcome outcome);
  // The group's start failed while it was forked: the forking stops, then abandon_start.
  void fail_start(std::exception_ptr error);
  // The group's start failed: its workers are killed, and `started_` told once they are reaped.
  void abandon_start(std::exception_ptr error);
  void signal_worker(const Worker& worker, Signalled how, int sig);
  void signal_group(Signalled how, int sig);
  void close_channels();
  void script_returned(int local_rank, pid_t pid, const std::string& notice);
  void worker_stopped(Worker& worker, int sig);
  // One event of a child of ours (reaper.hpp): a worker's end, stop or continuation, the
  // template's end, or an orphan's (nothing to do).
  void child_event(pid_t pid, const WaitEvent& event);
  // The group's exec reports are all in (failure: the first start that failed).
  void execs_reported(std::optional<std::pair<pid_t, int>> failure);
  // Once a start failed: when no worker of the group runs any more, `started_` gets the error.
  void abandoned_start_settled();
  void adopt(pid_t pid);
  bool leftovers(bool signal, int sig);
  void finish_step();
  void name_leftovers();
  // The Python bootstrap's directory, written at the first call; "" where it cannot be (said
  // once: workers then start without a diagnosis channel, and not from --preload's template).
  const std::string& bootstrap_dir();

  boost::asio::io_context& io_;
  Watchdog& watchdog_;
  std::unique_ptr<JobCgroup> cgroup_;  // null where the kernel does not let us make one
  // Before the template: its directory is removed only after the template is killed and reaped
  // (a template still starting would find its bootstrap gone).
  std::unique_ptr<PythonBootstrap> python_;
  bool python_failed_ = false;
  std::unique_ptr<WarmStart> warm_;  // null without --preload
  Console& err_;
  std::vector<Worker> workers_;
  ExitHandler on_exit_;
  std::unique_ptr<ExecReports> exec_reports_;
  std::function<void(std::exception_ptr)> started_;  // the group's start, still to be told
  std::exception_ptr start_error_;                   // a failed start, its workers being reaped
  // Their events while the group is forked or its exec reports come: handed on once they are in.
  std::vector<std::pair<pid_t, WaitEvent>> held_events_;
  // The group being forked, one worker after another; a pid the template's reply tells.
  std::vector<WorkerLaunch> launches_;
  std::size_t next_ = 0;
  bool forking_ = false;
  unsigned chain_ = 0;  // each group's start: a reply to an earlier one's is dropped
  std::optional<Forking> forking_now_;
  std::vector<Child> spawned_;
  std::unique_ptr<EarlyEvents> early_;  // a worker's events before the reply that names it
  std::vector<std::pair<Signalled, int>> late_signals_;  // sent to the group while forking
  ReturnHandler returned_;
  GroupOutput output_;
  boost::asio::steady_timer finish_timer_;
  std::chrono::steady_clock::time_point finish_deadline_;
  bool finish_killed_ = false;
  // When leftovers still alive after SIGTERM are named (once) instead of waited for silently.
  std::optional<std::chrono::steady_clock::time_point> finish_name_at_;
  std::function<void()> finish_done_;
};

}  // namespace trainrun::launch
