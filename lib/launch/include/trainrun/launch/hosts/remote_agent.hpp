#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// The agent's side of --hosts: `trainrun --remote-agent=VERSION ARGS...`, as the launching
// trainrun's ssh starts it on each host. Not an option for people: it is not in --help, only
// the first argument, and refused at a terminal.
inline constexpr const char* kRemoteAgentOption = "--remote-agent=";

struct RemoteAgent {
  std::string token;   // the job's rendezvous token, handed over on standard input
  std::string python;  // the interpreter the launcher chose (Handover::python), "" for none
};

// The workers' Python of an agent the launcher handed `python` to: that one where PYTHON_EXEC
// leaves the choice open (`config` from this host's command line) and it exists here; where it
// does not, this host's own choice and a line saying so (`note`). Changes only Python jobs.
void use_launcher_python(LaunchConfig& config, const std::string& python, std::string* note);

// When args[0] is --remote-agent=VERSION: refuses another version than this trainrun's (naming
// both) and a terminal on standard input, reads the launcher's handover line from standard input
// (waiting at most 30 s), sets the variables it forwards in this process's environment, and
// drops args[0]. Nothing for any other command line. Throws UsageError.
std::optional<RemoteAgent> take_remote_agent(std::vector<std::string>& args);

// Tells the launcher that the agent has started (hosts_plan.hpp's kReadyLine on standard
// output), then stops the job, as a signal from outside would, when standard input closes (the
// launcher stopped the job, or ssh lost the connection) or stays silent for
// kLauncherTimeoutSeconds (the launcher is cut off): with the signal of the launcher's `stop N`
// where it is one of `stop_signals`, else the first of them (SIGTERM for none). Standard input
// becomes /dev/null, which the workers inherit: the launcher's channel is the agent's alone.
// Throws SetupError when it cannot set the channel aside.
void watch_launcher(const std::vector<int>& stop_signals);

}  // namespace trainrun::launch
