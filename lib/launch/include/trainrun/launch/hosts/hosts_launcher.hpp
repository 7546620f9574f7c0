#pragma once

#include <map>
#include <string>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/hosts/hosts_options.hpp"

namespace trainrun::launch {

// Runs a --hosts/--hostfile job from the launching machine: one agent per host over ssh (every
// host, this machine's own name included, goes through ssh, so that every agent starts the same
// way), the job's token handed to each on ssh's standard input, every host's output on this
// console, a heartbeat to every agent, and a stop on SIGINT/SIGTERM/SIGHUP/SIGQUIT carried to
// every host with its signal (hosts_plan.hpp). `config`: the command line as the agents get it,
// for where the first host's agent is to host the rendezvous. Returns the job's exit status;
// throws UsageError for a bad host file, environment file or -x, and SetupError when the
// rendezvous port already answers on its host: another job's rendezvous holds it.
int run_hosts(const HostsOptions& options, const LaunchConfig& config,
              const std::map<std::string, std::string>& env);

}  // namespace trainrun::launch
