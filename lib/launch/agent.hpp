#pragma once

#include "config.hpp"

namespace trainrun::launch {

// Runs one node's part of a job to the end: rendezvous, start the workers, supervise them,
// restart or stop. Returns the process exit code trainrun should exit with.
int run_agent(const LaunchConfig& config);

}  // namespace trainrun::launch
