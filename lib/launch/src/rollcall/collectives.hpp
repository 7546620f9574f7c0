#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainrun::launch {

// What a rank's torch flight recorder says of its collectives, and what the job's ranks together
// say of a hang. The dump is the JSON of torch's _dump_fr_trace_json(includeCollectives=True,
// onlyActive=False), torch 2.x with NCCL or Gloo.

// The most process groups, and collectives of each, that one rank's summary keeps.
inline constexpr std::size_t kCollectiveGroupsKept = 32;
inline constexpr std::size_t kCollectivesKept = 4;

// One rank's dump reduced to what the verdict needs, small enough to cross the network:
//   {"version": "2.10",
//    "groups": {"0": {"desc": "default_pg",
//                     "collectives": [{"seq": 42, "op": "all_reduce", "in_sizes": [[4096]],
//                                      "in_dtypes": ["float32"], "out_sizes": [[4096]],
//                                      "out_dtypes": ["float32"], "state": "pending"}, ...],
//                     "p2p": [{"seq": 3, "op": "send 0->1", ...}]}},
//    "groups_left_out": 2}
// Groups are keyed by their name (the same on every rank), each with its last kCollectivesKept
// collectives in order and its last point-to-point operations apart (NCCL records those; Gloo
// does not); the kCollectiveGroupsKept groups used last, "groups_left_out" counting the others.
// A group the dump's "trainrun_groups" (the bootstrap's list of the groups this rank belongs to)
// names and the dump has no entry of is kept with no collectives, after the others: this rank is
// a member that has entered none.
// Dtypes are torch's Python names; a state is "completed" or "pending". A list of more than 4
// tensors keeps 4 and says how many it left out ("in_left_out", "out_left_out"), names and
// operations are cut at 128 bytes: the worst dump gives a few hundred kilobytes, a real one a few
// hundred bytes a group. Never throws: a
// dump of another shape gives {"error": "..."} saying what was wrong. Pure.
nlohmann::json compact_collectives(const nlohmann::json& dump);

// torch's Python name of a dtype its C++ side writes ("Float" is "float32", "BFloat16"
// "bfloat16"); one it does not know, as given.
std::string python_dtype(const std::string& dtype);

struct RankCollectives {
  int rank = 0;
  std::string node;
  nlohmann::json compact;  // compact_collectives of its dump; null when none came
  std::string where;       // its main thread's top frame: "stuck_here() (train.py:19)"; or ""
};

struct CollectivesVerdict {
  // For the hang report, the first naming the hang's cause: "rank 1 (node1) never entered
  // collective #42 (all_reduce, group 0) that ranks 0,2-3 wait in; rank 1 is in stuck_here()
  // (train.py:19)"; then a "note: ..." for each rank whose summary could not be read.
  std::vector<std::string> lines;
  // The ranks that never entered a collective others wait in and wait in no collective
  // themselves (the hang's cause), ascending; where every such rank waits in another group's
  // collective, all of them.
  std::vector<int> behind;
  // For the job summary: {"groups": [{"group", "desc", "ranks": [{rank, seq, op, in_sizes,
  // in_dtypes, state}], "lines"}], "behind", "unread": [{rank, error}]}.
  nlohmann::json json;
  // For trainrun --stacks, a line per group: "group 0 (default_pg): ranks 0-3 at #42
  // all_reduce(4096 float32), pending".
  std::vector<std::string> table;
};

// Each process group's ranks compared at their last collectives: the ranks behind the others, the
// ranks that called another operation, other sizes or dtypes than the rest, or every rank waiting
// inside the same collective. A rank takes part in a group only when its summary has the group (a
// subgroup of ranks 0 and 1 says nothing of ranks 2 and 3), with no collectives when it is a
// member that has entered none; a rank without a summary, or with an "error", is left out and
// named in a note. A rank behind that waits inside another group's collective is said to wait
// there, after the ranks behind that wait in none. Never throws. Pure.
CollectivesVerdict judge_collectives(const std::vector<RankCollectives>& ranks);

}  // namespace trainrun::launch
