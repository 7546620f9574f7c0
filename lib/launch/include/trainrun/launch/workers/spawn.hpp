#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace trainrun::launch {

// A worker just forked, not yet known to have started its program.
struct Spawned {
  pid_t pid = -1;  // -1: it could not be forked; errno's value is in `error`
  int error = 0;
  // The read end of the pipe where a failed exec leaves its errno; closed on exec when it works.
  int exec_report = -1;
};

// Forks `program` (resolved) with `argv` and `envp` ("NAME=value") as the leader of a session
// (and so of a process group) of its own, its stdout and stderr on `out_fd` and `err_fd` (-1: ours), in the cgroup whose
// cgroup.procs is `cgroup_fd` (-1: none), bound to `cpus` (empty: the affinity it inherits),
// killed when this process dies, with no signal blocked.
// Does not wait for the exec: forking a whole group first starts it in one pass.
Spawned spawn_worker(const std::string& program, const std::vector<std::string>& argv,
                     const std::vector<std::string>& envp, int out_fd, int err_fd, int cgroup_fd,
                     const std::set<int>& cpus = {});

// Waits until a spawned worker runs its program (0) or its exec failed (the errno); closes the
// report's pipe.
int wait_for_exec(Spawned& spawned);

}  // namespace trainrun::launch
