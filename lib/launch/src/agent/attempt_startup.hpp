#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "trainrun/launch/core/job.hpp"

namespace trainrun::launch {

// Where one attempt's seconds before training went, on one node: each step in seconds since the
// attempt began (`origin`). A value the agent fills from its events; what is said of it is pure.
struct AttemptStartup {
  // What the seconds count from: the job's start (the first attempt); for a restart, the exit of
  // the first of this node's workers to fail while the last attempt ran, as trainrun reaped it;
  // where none failed here first, when this node began to stop them (another node's failure, a
  // hang, a lost node); where it had none to stop, the last attempt's end.
  enum class Origin { job_start, worker_exit, stop, attempt_end };

  // Who serves the workers' c10d store: this agent (it sees each rank's first request), the agent
  // of node rank 0, or worker RANK 0 (TORCHELASTIC_USE_AGENT_STORE=False: no agent sees it).
  enum class Store { here, other_node, worker };

  Topology topology;
  Store store = Store::here;
  Origin origin = Origin::job_start;
  int origin_rank = -1;             // worker_exit: the rank whose exit it was
  double origin_at = 0;             // unix seconds
  std::optional<double> round_s;    // the round formed (one node: its topology was made)
  std::optional<double> workers_s;  // every local worker was started (one pass forks them all)
  std::map<int, double> started;    // a rank of this node: when its worker was started
  std::map<int, double> at_store;   // rank: its first request to the store
  std::map<int, int> node_of;       // a rank of another node in at_store: that node
  // A rank of this node: its first output (the first step of its own that the agent sees; none
  // for a worker whose streams do not pass through trainrun).
  std::map<int, double> first_output;
  // A rank of this node whose program uses the C++ runtime: its first report() (the time the
  // runtime leaves in the rank's log directory).
  std::map<int, double> first_report;
  int unattributed = 0;  // store connections no node has named (yet)
  // Why other nodes' connections stay unnamed: a node did not answer, or could not be asked.
  std::string unnamed_why;

  // Every rank this agent can see at its store has come, or it sees none; or, on a job of several
  // nodes, this node's ranks have come and another node could not say which are its own.
  bool complete() const;
  // The node of `rank`, which is at the store.
  int node(int rank) const;
  // Every worker of this node has written its first output.
  bool all_spoke() const;
};

// The rank last at the store (or last to do whatever the times are of), against the median of
// the ranks seen; `much_slower` when it came
// more than twice the median and more than 1 s after it.
struct SlowestRank {
  int rank = 0;
  double at_s = 0;
  double median_s = 0;
  bool much_slower = false;
};
std::optional<SlowestRank> slowest_rank(const AttemptStartup& s);
// The same of the ranks' times in `at` (rank: seconds).
std::optional<SlowestRank> slowest_of(const std::map<int, double>& at);

// `attempt 1: round 0.02 s, workers started 0.03 s, ranks at the store 0.41 s (slowest: rank 3
// on node 0, 0.41 s); from rank 1's exit`, with the ranks not seen named; a restart's says what
// its seconds count from.
std::string startup_line(const AttemptStartup& s);

// `attempt 1: first output 1.52 s (slowest: rank 1, 1.52 s)`: when this node's workers first wrote;
// then, where they use the C++ runtime, `; first report 3.10 s (slowest: rank 0, 3.10 s)`.
std::string first_output_line(const AttemptStartup& s);

// The summary's "startup" of an attempt (docs/cli.md, "Job summary").
nlohmann::ordered_json startup_json(const AttemptStartup& s);

}  // namespace trainrun::launch
