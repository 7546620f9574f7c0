#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent_actions.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// A confirmed hang as the agent reports it: the lines for stderr (the roll call after them), the
// hang for the job summary, and the attempt's failure, which stops the job as a worker's would.
struct HangFailure {
  std::string text;
  nlohmann::json hang;
  ProcessFailure failure;
};

// What happens to a node, as its parts raise it: the agent handles each in turn, and the policy
// decides what it means.
namespace event {
// Without a rendezvous: one node, its own topology, worker RANK 0's store on `master_port`.
struct StartSingleNode {
  int master_port = 0;
};
// With a rendezvous: join the first round and wait for an assignment.
struct StartInJob {};
// StartWorkers could not start the group (the supervisor has killed what it started); the node
// exits with `exit_code` (126/127 for an entrypoint that cannot run, as a shell).
struct StartFailed {
  std::string reason;
  int exit_code = 1;
};
// The attempt was stopped while its group waited for the --preload template: no worker started.
struct StartCancelled {};
struct WorkerExited {
  WorkerExit exit;
};
// The job was found hung (--hang-timeout): `hang.failure` is the attempt's failure (its status the
// hang exit code), reported and stopped for as a worker's failure. Only while the group runs.
struct HangConfirmed {
  HangFailure hang;
};
// After Sweep: nothing of the attempt's workers is left. `stderr_tails[local_rank]`: the last
// lines of that worker's stderr, read to the end, shown in its failure when it wrote no error file.
struct AttemptEnded {
  std::vector<std::string> stderr_tails;
};
// A stop or forwarded signal (the agent reaps on SIGCHLD itself).
struct Signal {
  int sig = 0;
};
// The grace timer (ArmGraceTimer) went off.
struct GraceExpired {};
// A lost launcher (--hosts: its channel closed, or silent too long): the job stops as for the
// stop signal `sig` (the launcher's own where it is one of the stop signals).
struct LauncherLost {
  int sig = 0;
};
// The rendezvous' decisions for the whole job. A round formed: its assignment, before the
// preflight's checks (RoundFormed); the same assignment once they passed, or at once where there
// is nothing to check (Assignment).
struct RoundFormed {
  rendezvous::Assignment assignment;
};
struct Assignment {
  rendezvous::Assignment assignment;
};
// A check of the round's preflight failed: `line` ends the job on every node (not a leave: a lost
// node would be replaced by a restart, which would meet the same misconfiguration).
struct PreflightFailed {
  std::string line;
};
struct Restart {
  rendezvous::Restart restart;
};
// A failure ends the job: stop the workers and say what failed; the stop follows.
struct Halt {
  rendezvous::Halt halt;
};
struct Stop {
  rendezvous::Stop stop;
};
// A connection to the store this agent serves made its first request: from worker `rank` of this
// node, or from no worker it can name (another node's, a stranger). Recorded, decides nothing.
struct ReachedStore {
  std::optional<int> rank;
  // When its first request came (the lookup of its rank runs off the loop, and ends later), and
  // the attempt it came in (-1: as the record's); a default time: when the event is raised.
  std::chrono::steady_clock::time_point at{};
  int restart_count = -1;
};
// Node rank 0 asked the other nodes whose the store's connections from no worker of its own are
// (StoreAsker): the ranks they named, each with its node and its first request's time; `unnamed`:
// the connections asked about that no node named; `why`: why some node did not say (empty: every
// node answered). Recorded, decides nothing.
struct StoreOwnersNamed {
  struct Rank {
    int rank = 0;
    int node = 0;
    double at_s = 0;
  };
  int restart_count = 0;
  std::vector<Rank> ranks;
  int unnamed = 0;
  std::string why;
};
// Every worker of attempt `restart_count` was started (StartWorkers; after the --preload
// template's imports, later): `started`, by local rank, when each was; `at`, when the last was.
// Recorded, decides nothing.
struct WorkersStarted {
  int restart_count = 0;
  std::map<int, std::chrono::steady_clock::time_point> started;
  std::chrono::steady_clock::time_point at;
};
// Worker `local_rank` of attempt `restart_count` wrote its first output (a stream that passes
// through trainrun): the first step of its start-up that the agent sees. Recorded, decides nothing.
struct FirstOutput {
  int local_rank = 0;
  int restart_count = 0;
};
}  // namespace event

using AgentEvent =
    std::variant<event::StartSingleNode, event::StartInJob, event::StartFailed,
                 event::StartCancelled, event::WorkerExited, event::HangConfirmed,
                 event::AttemptEnded, event::Signal, event::LauncherLost, event::GraceExpired,
                 event::RoundFormed, event::Assignment, event::PreflightFailed, event::Restart,
                 event::Halt, event::Stop, event::ReachedStore, event::StoreOwnersNamed,
                 event::WorkersStarted, event::FirstOutput>;

// How the agent's parts hand it an event: the one way they reach it.
using RaiseEvent = std::function<void(AgentEvent)>;

}  // namespace trainrun::launch
