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
};
// Raise GraceExpired at `deadline` (replaces an earlier timer).
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
                 action::Join, action::ReportFailure, action::ReportEnded, action::ReportDone,
                 action::ShutdownRendezvous, action::Say, action::WriteSummary, action::Finish>;
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
