#pragma once

#include <set>
#include <string>
#include <vector>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// How a worker is started, as data for any starter (spawn() forks and execs it): `program`
// (resolved) with `argv` and `envp` ("NAME=value") as the leader of a session (and so of a
// process group) of its own, its stdout and stderr on `out_fd` and `err_fd` (-1: ours), in the
// cgroup whose directory is open as `cgroup_fd` (-1: none), bound to `cpus` (empty: the affinity it
// inherits), killed when this process dies, with no signal blocked, SIGPIPE at its default and
// the descriptor limit trainrun was started with.
SpawnRequest worker_spawn_request(const std::string& program, const std::vector<std::string>& argv,
                                  const std::vector<std::string>& envp, int out_fd, int err_fd,
                                  int cgroup_fd, const std::set<int>& cpus = {});

}  // namespace trainrun::launch
