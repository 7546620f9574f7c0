#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What the policy asks the agent to do, in order.
namespace action {
// Start the group: one worker per local rank with this topology.
struct StartWorkers {
  Topology topology;
  int max_restarts = 0;  // TORCHELASTIC_MAX_RESTARTS: the job's, once the rendezvous has said it
};
// Signal every worker still running: with `whole_group`, everything in its process group (its
// DataLoader's processes too); without, the worker process alone.
struct SignalWorkers {
  int signal = 0;
  bool whole_group = true;
  bool stop = false;  // the attempt is being stopped (not a signal passed on to the workers)
  // A SIGTERM stop for the attempt's failure (a worker's, a hang found here or on another node),
  // no stop or forwarded signal having reached trainrun: Python workers that have been quiet for
  // the hang timeout get SIGABRT first, so that faulthandler writes every thread's traceback.
  // Never for a user's stop: their handlers expect SIGTERM.
  bool failure_stop = false;
};
// Once per stop of an attempt: raise GraceExpired at `deadline` (replaces an earlier timer). The
// attempt is stopping: the store this node serves takes no new connection from now on, and a hang
// found is no longer the attempt's failure.
struct ArmGraceTimer {
  std::chrono::steady_clock::time_point deadline;
};
// Every worker has ended: stop what they left (SIGKILL after `grace` seconds), drain their
// output, then raise AttemptEnded.
struct Sweep {
  double grace = 0;
};
// Join the rendezvous' next round.
struct Join {};
// A round formed: the last attempt is over on every node, so the store this node may serve takes
// no new connection (MASTER_PORT is the preflight's until the round's workers start), and it
// admits `node_addresses`, the round's nodes, from its next attempt on.
struct StoreForRound {
  std::vector<std::string> node_addresses;
};
// Run the round's preflight checks of its peers; Assignment is raised once they passed (at once
// where this node has nothing to check), PreflightFailed when one failed.
struct CheckRound {
  rendezvous::Assignment assignment;
};
// The round's checks still running are for a round that is over: their verdict is dropped.
struct DropChecks {};
struct ReportFailure {
  rendezvous::FailureReport failure;
  std::vector<rendezvous::WorkerFailure> failures;  // this node's, as relayed_failures gives them
  int not_relayed = 0;
};
// After a halt, every worker has ended: tell the rendezvous what failed (perhaps nothing).
struct ReportEnded {
  std::vector<rendezvous::WorkerFailure> failures;
  int not_relayed = 0;
};
// All of this node's workers succeeded: wait at the exit barrier.
struct ReportDone {};
struct ShutdownRendezvous {
  std::string reason;
};
// End the job on every node for `reason` (the preflight failed).
struct AbortRendezvous {
  std::string reason;
};
// One line of trainrun's own ("trainrun: " is added), on stderr, shown as its level allows.
struct Say {
  std::string line;
  Level level = Level::info;
};
// A failure summary, as it is, on stderr.
struct WriteSummary {
  std::string text;
};
// The job is over for this node: stop the event loop and exit with `exit_code`.
struct Finish {
  int exit_code = 0;
};
}  // namespace action

using AgentAction =
    std::variant<action::StartWorkers, action::SignalWorkers, action::ArmGraceTimer, action::Sweep,
                 action::Join, action::StoreForRound, action::CheckRound, action::DropChecks,
                 action::ReportFailure, action::ReportEnded, action::ReportDone,
                 action::ShutdownRendezvous, action::AbortRendezvous, action::Say,
                 action::WriteSummary, action::Finish>;
using AgentActions = std::vector<AgentAction>;

// A worker's end, with what the agent read of its error file (only when it failed).
struct WorkerExit {
  int local_rank = 0;
  pid_t pid = 0;
  ExitStatus status;
  double seen_at = 0;      // unix seconds, when the exit was seen
  std::string error_file;  // the worker's TORCHELASTIC_ERROR_FILE
  std::optional<ErrorFileContents> contents;
  std::string problem;     // why the error file could not be read, if it could not
  std::string stdout_log;  // its log files, empty for a stream not sent to one
  std::string stderr_log;
  // What went wrong after its script was over (script_end.hpp), `status` then the script's own;
  // empty: nothing.
  std::string teardown;
  // Ended by the SIGABRT this agent sent it for its traceback (a stop of a quiet job): the
  // agent's stop, not a failure of its own.
  bool aborted = false;
};

}  // namespace trainrun::launch
