#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
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
// output) and sets the launcher's channel aside: returns standard input moved to a descriptor of
// its own (close-on-exec), standard input becoming /dev/null, which the workers inherit, so that
// none can take a heartbeat or a stop from it. Throws SetupError.
int take_launcher_channel();

// The launcher's channel, watched on the agent's loop: when it closes (the launcher stopped the
// job, or ssh lost the connection) or stays silent for kLauncherTimeoutSeconds (the launcher is
// cut off), `lost` is called once with the stop signal the job stops as for: the one of the
// launcher's `stop N` where it is one of `stop_signals`, else the first of them (SIGTERM for
// none). Nothing is watched before the loop runs: what came meanwhile is read then.
class LauncherWatch {
 public:
  using Lost = std::function<void(int sig)>;
  LauncherWatch(boost::asio::io_context& io, int channel, std::vector<int> stop_signals, Lost lost);
  LauncherWatch(const LauncherWatch&) = delete;
  LauncherWatch& operator=(const LauncherWatch&) = delete;
  // The job is over: no more reads nor timeouts.
  void cancel();

 private:
  void read();
  void arm();
  void stop();

  boost::asio::posix::stream_descriptor channel_;
  boost::asio::steady_timer silence_;
  std::vector<int> stop_signals_;
  Lost lost_;
  int signal_;
  std::string line_;
  char buffer_[256];
  bool done_ = false;
};

}  // namespace trainrun::launch
