#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/launch/core/log.hpp"

namespace trainrun::launch {

// How one host's ssh ended.
struct HostEnd {
  int status = 0;          // its exit status (the shell's code when a signal killed ssh)
  int killed_by = 0;       // the signal that ended ssh itself, if one did
  bool ready = false;      // its agent had said that it started
  std::string last_error;  // ssh's (or the remote shell's) last stderr line
};

// What the launcher does about one host's end.
struct HostVerdict {
  std::vector<std::pair<std::string, Level>> lines;  // to say, in order
  std::optional<std::string> stop;  // stop every agent, saying why (once stopping, nothing)
  bool failure_grace = false;       // the others have a while to end on their own first
};

// Each host's end under --hosts, and the job's exit status from them: an agent that did not
// start stops the job (exit 1), an ssh connection lost is the rendezvous' to decide on (not the
// job's status), an agent's failure is the job's (the first one's status), a stop signal to the
// launcher ends it with the shell's code for N, and a job where no agent succeeded with 255. Pure.
class HostsOutcome {
 public:
  // `hosts` as listed; `self`: this trainrun's path, named where a host lacks it.
  HostsOutcome(std::vector<std::string> hosts, std::string self);

  // Host `i` ended; `stopping`: the launcher is stopping the agents, `interrupted`: for a signal.
  HostVerdict ended(size_t i, const HostEnd& end, bool stopping, bool interrupted);

  // Once every host has ended: "agents ended: ..." and its level (debug when every agent
  // succeeded); `ready`: by host, whether its agent said it started, by the end of its output.
  std::pair<std::string, Level> summary(const std::vector<bool>& ready) const;
  // The job's exit status; `interrupted`: the stop signal that reached the launcher, or 0.
  int exit_code(int interrupted) const;

 private:
  std::vector<std::string> hosts_;
  std::string self_;
  std::vector<std::optional<HostEnd>> ends_;
  bool start_failed_ = false;
  bool any_success_ = false;
  std::optional<int> first_failure_;
};

}  // namespace trainrun::launch
