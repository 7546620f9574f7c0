#pragma once

#include "config.hpp"

namespace trainrun::launch {

// Runs one node's part of a job to the end: rendezvous, start the workers, supervise them,
// restart or stop. Returns the job's exit code. Before anything starts, counts the workers
// (resolve_worker_count) and checks the entrypoint: a LaunchError from either carries its own
// exit code.
int run_agent(const LaunchConfig& config);

}  // namespace trainrun::launch
