#include "hosts_outcome.hpp"

#include <fmt/format.h>

#include "trainrun/base/process.hpp"
#include "trainrun/launch/core/failure.hpp"

namespace trainrun::launch {

HostsOutcome::HostsOutcome(std::vector<std::string> hosts, std::string self)
    : hosts_(std::move(hosts)), self_(std::move(self)), ends_(hosts_.size()) {}

HostVerdict HostsOutcome::ended(size_t i, const HostEnd& end, bool stopping, bool interrupted) {
  ends_[i] = end;
  HostVerdict out;
  const std::string& host = hosts_[i];
  const int code = end.status;
  if (!end.ready) {
    if (stopping && interrupted) return out;
    std::string hint;
    if (code == 127) hint = fmt::format("; is trainrun installed at {} on {}?", self_, host);
    out.lines.emplace_back(
        fmt::format("{}: cannot start its agent (ssh exit {}): {}{}", host, code,
                    end.last_error.empty() ? "no message" : end.last_error, hint),
        Level::error);
    start_failed_ = true;
    out.stop = "stopping the agents on the other hosts";
    return out;
  }
  // ssh killed (not by us) takes the connection with it, as ssh's own 255 does: the agent's
  // standard input closes and it stops; its status is not the job's.
  const bool lost = code == 255 || end.killed_by != 0;
  if (lost && !stopping) {
    // 255 is ssh's own status for a connection it lost (ServerAliveInterval's timeout among
    // them): its last line says why.
    const std::string why = end.killed_by            ? "ssh ended by " + signal_name(end.killed_by)
                            : end.last_error.empty() ? std::string("ssh exit 255")
                                                     : "ssh exit 255: " + end.last_error;
    out.lines.emplace_back(fmt::format("{}: ssh connection lost ({}); node rank {} is lost to "
                                       "the job, the rendezvous decides what follows",
                                       host, why, i),
                           Level::warning);
    return out;
  }
  if (code != 0 && !lost && !first_failure_) {
    first_failure_ = code;
    out.failure_grace = !stopping;
  }
  if (code == 0) any_success_ = true;
  return out;
}

std::pair<std::string, Level> HostsOutcome::summary(const std::vector<bool>& ready) const {
  std::string statuses;
  bool all_zero = true;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const int status = ends_[i] ? ends_[i]->status : 0;
    statuses += fmt::format("{}{} {}", statuses.empty() ? "" : ", ", hosts_[i],
                            ready[i] ? fmt::format("exit {}", status) : "not started");
    all_zero = all_zero && ready[i] && status == 0;
  }
  return {"agents ended: " + statuses, all_zero ? Level::debug : Level::info};
}

int HostsOutcome::exit_code(int interrupted) const {
  if (interrupted) return shell_code_for_signal(interrupted);
  if (start_failed_) return 1;
  if (first_failure_) return *first_failure_;
  return any_success_ ? 0 : 255;
}

}  // namespace trainrun::launch
