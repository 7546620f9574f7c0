#pragma once

#include <string>

#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

class Watchdog;

// Runs one node's part of a job to the end: rendezvous, start the workers, supervise them,
// restart or stop. Returns the job's exit code. Before anything starts, counts the workers
// (resolve_worker_count) and checks the entrypoint: a LaunchError from either carries its own
// exit code. `launcher_channel`: for an agent that trainrun --hosts started, the launcher's
// channel (remote_agent.hpp), watched on the agent's loop; -1 for none. (run_agent.cpp)
int run_agent(const LaunchConfig& config, int launcher_channel = -1);

// The job itself, once the worker count and `program` are resolved in `config`: the agent's parts
// raise events (worker exits, signals, timers, the rendezvous), the Agent hands each to
// AgentPolicy and carries out its actions, on one io_context. Jobs started are stopped through
// `watchdog` should trainrun die. (agent.cpp)
int run_job(const LaunchConfig& config, const std::string& program, Watchdog& watchdog,
            int launcher_channel = -1);

}  // namespace trainrun::launch
