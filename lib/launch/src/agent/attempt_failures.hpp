#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent_actions.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What failed in one attempt of a node's worker group, and every word the node says about it:
// the report the other nodes get, the lines of a restart, the failure summary and the exit status
// it ends with. Pure, as the policy that owns it: no process, socket or clock.
class AttemptFailures {
 public:
  // `entrypoint` titles the summaries; `host` is this node's name in them.
  AttemptFailures(std::string entrypoint, std::string host);

  // A new attempt: nothing has failed and nothing was reported.
  void clear();
  // A worker's failed end, as rank base_rank + its local rank. It is listed when it `counts`, or
  // whenever it left an error report of its own; returns the warning to show when that report
  // cannot be read.
  std::optional<std::string> record(const WorkerExit& exit, int base_rank, bool counts);
  // A hang this node found, its report (its line first) printed here already: listed as the
  // rank's failure, and this node's summaries point to that line instead of repeating it.
  void add_hang(ProcessFailure failure);
  // The end of the stderr of each worker, by local rank, shown when it wrote no error file.
  void stderr_tails(const std::vector<std::string>& tails);

  bool empty() const { return failures_.empty(); }
  const std::vector<ProcessFailure>& list() const { return failures_; }

  // What the other nodes are told of the attempt's first failure: once, then nullopt.
  std::optional<action::ReportFailure> report();
  // After a halt: every failure of the attempt (perhaps none).
  action::ReportEnded ended() const;

  // The warning of a restart without a rendezvous: the root cause, then `restart` of `max`.
  std::string restart_line(int restart, int max_restarts) const;
  // The warning of a restart the rendezvous decided for another node's failure; nullopt when
  // the failure was this node's, reported already.
  std::optional<std::string> restart_line(const rendezvous::Restart& r, int max_restarts) const;

  // The attempt's summary; returns the node's exit status, the root cause's (never 0).
  int fail(AgentActions& out) const;
  // How the node ends when the rendezvous stopped the job, `ran` when it ever started a group:
  // says why and returns its exit status.
  int stopped(AgentActions& out, const rendezvous::Stop& s, bool ran) const;

 private:
  // The job's failures as the rendezvous decided them, this node's own shown whole.
  int fail_with_job(AgentActions& out, const rendezvous::Stop& s) const;
  bool ours(const std::optional<rendezvous::FailureReport>& f) const;
  bool is_hang_said(const ProcessFailure& f) const;
  // `list` as this node's summary shows it: the hang it reported points to its report.
  std::vector<ProcessFailure> as_shown_here(std::vector<ProcessFailure> list) const;

  std::string entrypoint_;
  std::string host_;
  std::vector<ProcessFailure> failures_;
  bool reported_ = false;
  std::optional<ProcessFailure> hang_said_;
};

}  // namespace trainrun::launch
