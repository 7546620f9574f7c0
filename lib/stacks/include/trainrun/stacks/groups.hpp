#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainrun/stacks/stack.hpp"

namespace trainrun::stacks {

struct RankStack {
  int rank = 0;
  std::string host;
  Stack stack;
};

// What makes two ranks' stacks "identical": the frames of their main thread, innermost first,
// each as function name and file base name, without line numbers or addresses (ranks in the same
// loop at different lines, or with the library at another address, wait in the same place).
// Where the main thread has Python frames, only those (the native frames under a Python frame
// differ with how each rank happens to wait: futex, poll, recv). A stack without frames (the
// /proc fallback) is its main thread's system call and wait channel. `with_lines` keeps each
// frame's line: where a rank is, rather than where it waits (has its stack moved?).
std::vector<Frame> signature(const Stack& stack, bool with_lines = false);

struct Group {
  std::vector<int> ranks;          // ascending
  std::vector<std::string> hosts;  // each once, in the order of first rank
  std::vector<Frame> frames;       // the signature
  Frame top;                       // its first rank's first frame, with its line
};

// Ranks with identical signatures together; the smallest group first, ties by lowest rank.
std::vector<Group> group_stacks(const std::vector<RankStack>& stacks);

// "0-1,3": ascending, consecutive ranks as ranges.
std::string rank_ranges(std::vector<int> ranks);

// One line per group: "ranks 0-1,3 (3): all_reduce <- train_step <- main", at most `max_frames`
// frames each (then "<- ... (N more)").
std::string format_groups(const std::vector<Group>& groups, std::size_t max_frames = 12);

// [{"ranks": [...], "hosts": [...], "frames": [{function, file, kind}...]}...]
nlohmann::json groups_json(const std::vector<Group>& groups);

// A rank whose stack differs from everyone else's.
struct Suspect {
  int rank = 0;
  std::string host;
  std::string where;  // "stuck_here() (train.py:41)"
};

// Where a stack's main thread is: the innermost frame of the user's code, a Python frame outside
// the standard library and site-packages, or a native frame outside the system's libraries; else
// the innermost frame; else its system call. "stuck_here() (train.py:41)".
std::string where_is(const Stack& stack);

// The odd ranks: the members of the smallest group(s) when all other ranks are in one group,
// larger than those; none when all agree or no group stands out (two halves, three ways).
// `where` is the innermost frame of the user's code in that rank's main thread: a Python frame
// outside the standard library and site-packages, or a native frame outside the system's
// libraries; else the innermost frame; else its system call.
std::vector<Suspect> odd_ranks(const std::vector<Group>& groups,
                               const std::vector<RankStack>& stacks);

// "rank 2 on node1 is in stuck_here() (train.py:41) while ranks 0-1,3 wait in all_reduce"; empty
// without suspects.
std::string describe_suspects(const std::vector<Suspect>& suspects,
                              const std::vector<Group>& groups);

// One file per rank in `directory` (which must exist): "rank_<rank>.txt", the formatted stack
// followed by the tool's raw output. Returns the paths written; throws std::runtime_error naming
// the file that could not be written.
std::vector<std::string> write_dumps(const std::string& directory,
                                     const std::vector<RankStack>& stacks);

}  // namespace trainrun::stacks
