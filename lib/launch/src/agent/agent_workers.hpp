#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "agent_actions.hpp"
#include "agent_consoles.hpp"
#include "agent_events.hpp"
#include "file_timer_server.hpp"
#include "job_logs.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"
#include "trainrun/launch/rollcall/stack_collector.hpp"
#include "trainrun/launch/workers/supervisor.hpp"
#include "worker_group_launch.hpp"

namespace trainrun::launch {

class Watchdog;

// The node's worker group as the agent runs it, attempt after attempt: started, signalled and
// swept as the agent asks, each worker's end read (its error file, its log files) and raised as
// an event, as are a group that cannot start, the grace timer, the end of a sweep and each
// worker's first output; and who
// runs as which rank in the running attempt, for the roll call and the file timer. A Python
// worker whose script is over (its diagnosis channel says so) and whose process has not exited
// --exit-grace seconds later is named with its stack and ended; its end counts as its script's
// (script_end.hpp).
class AgentWorkers {
 public:
  AgentWorkers(boost::asio::io_context& io, Watchdog& watchdog, AgentConsoles& consoles,
               const LaunchConfig& config, const std::string& program, const std::string& host,
               const JobLogs& logs, RaiseEvent raise);

  // --numa-binding's CPUs, planned once (WorkerGroupLaunch::plan_numa).
  void plan_numa(const std::map<std::string, std::string>& inherited);
  // Starts the attempt's group (`watched`: under --hang-timeout), after `prepare` (what the
  // workers need ready first; a LaunchError it throws is a failure to start) and after the
  // --preload template's imports, which the loop does not wait for: `started` runs once the
  // group has started, at once or later. Where it could not start, StartFailed is raised.
  void start(const Topology& topology, const JobSettings& job,
             const std::map<std::string, std::string>& inherited, bool watched,
             const std::function<void()>& prepare, std::function<void()> started);
  // With `abort_first`, SIGABRT to the workers alone instead (faulthandler's tracebacks). A stop
  // (a.stop) before a group waiting for its template has started drops that start:
  // StartCancelled is raised.
  void signal(const action::SignalWorkers& a, bool abort_first);
  // GraceExpired is raised at the deadline.
  void arm_grace(const action::ArmGraceTimer& a);
  // AttemptEnded is raised once nothing of the group is left (at once, when nothing is).
  void sweep(const action::Sweep& a);
  void cancel_grace() { grace_timer_.cancel(); }
  // SIGCHLD came: each worker's end is raised as WorkerExited.
  void reap();
  void set_progress(std::function<void()> progress) {
    supervisor_.set_progress(std::move(progress));
  }
  // TorchElastic's file timer, when the job asks for it as torchrun's: the workers find its FIFO
  // in TORCHELASTIC_TIMER_FILE, set in `inherited`; each request is a sign of life (`progress`).
  void start_file_timer(std::map<std::string, std::string>& inherited,
                        std::function<void()> progress);
  // The job is over: its FIFO's wait would keep the rendezvous' last run of the loop busy.
  void stop_file_timer() { file_timer_.reset(); }

  int attempt() const { return topology_.restart_count; }
  // The running attempt's node rank; -1 before the first.
  int node_rank() const { return node_rank_; }
  NodeWorkers node_workers() const;
  // The running attempt's workers by local rank: when each was started.
  std::map<int, std::chrono::steady_clock::time_point> started() const {
    return supervisor_.started();
  }
  std::optional<FileTimerServer::Worker> find(pid_t pid) const;
  // `name` in the running attempt's directory of the log tree.
  std::string attempt_path(const std::string& name) const {
    return logs_.attempt_path(attempt(), name);
  }

 private:
  void exited(int local_rank, pid_t pid, ExitStatus status);
  // Raises StartFailed for what a start threw.
  void start_failed(std::exception_ptr error);
  void script_returned(int local_rank, pid_t pid, const ScriptReturn& script);
  // --exit-grace is over for worker `local_rank`: its stack, then its end.
  void not_exited(int local_rank, pid_t pid);
  void end_not_exited(int local_rank, pid_t pid, stacks::Stack stack);

  // A running worker whose script is over.
  struct Finished {
    pid_t pid = 0;
    ScriptReturn script;
    std::chrono::steady_clock::time_point at;
    std::unique_ptr<boost::asio::steady_timer> grace;
    bool ended = false;  // by trainrun, after the grace
    std::string where;   // where it was then
  };

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  AgentConsoles& consoles_;
  std::string host_;
  const JobLogs& logs_;
  RaiseEvent raise_;
  Supervisor supervisor_;
  bool starting_ = false;  // a group's start waits for the --preload template
  boost::asio::steady_timer grace_timer_;
  WorkerGroupLaunch launch_;
  std::unique_ptr<FileTimerServer> file_timer_;
  StackCollector collector_;
  std::map<int, Finished> finished_;  // the running attempt's, by local rank
  bool signalled_ = false;            // the running attempt's group was sent a signal
  bool reaping_ = false;              // inside reap()
  bool aborted_ = false;              // the running attempt's workers were sent SIGABRT
  Topology topology_;   // the running attempt's: its restart count, RANK of local rank 0
  int node_rank_ = -1;  // -1 until the first attempt
};

}  // namespace trainrun::launch
