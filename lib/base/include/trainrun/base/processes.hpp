#pragma once

#include <sys/types.h>

#include <optional>
#include <vector>

namespace trainrun {

// The kernel's process table, read from /proc: the one place trainrun and its watchdog parse it.

// What /proc/PID/stat says of one process.
struct ProcessStat {
  char state = 0;  // 'R', 'S', 'Z', ...
  pid_t parent = 0;
  pid_t group = 0;
};

// The ids of every process /proc lists now.
std::vector<pid_t> process_ids();

// One process' state, parent and group; nothing once it is gone.
std::optional<ProcessStat> process_stat(pid_t pid);

// The live processes of process group `pgid` (zombies left out).
std::vector<pid_t> group_members(pid_t pgid);

// The live children of process `parent` (zombies left out).
std::vector<pid_t> live_children(pid_t parent);

}  // namespace trainrun
