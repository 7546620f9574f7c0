#pragma once

#include <optional>

#include "agent_actions.hpp"
#include "attempt_failures.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// The orders that stop a node's attempt from outside its workers: a stop signal of the user's, or
// the rendezvous' new round, halt or end of the job. They decide which failed exits still count
// while the group stops, and what follows the attempt in a job. Pure, as the policy that owns it.
class StopOrders {
 public:
  // A new attempt: nothing stops it yet. The rendezvous' stop stays: it ends the job.
  void new_attempt();

  void on_signal(int sig) { signal_ = sig; }
  void on_restart() { restart_ = true; }
  void on_stop(const rendezvous::Stop& s) { stop_ = s; }
  void on_halt() { halted_ = true; }

  // The stop signal that reached the node, 0 while none has.
  int signal() const { return signal_; }
  // The rendezvous has stopped the job.
  bool stopped() const { return stop_.has_value(); }

  // A failed exit counts while the group runs (`running`). Once this node stops it for a failure
  // of its own, a worker that ended on its own (an exit code, a signal we did not send) failed
  // too, as in torchrun's table of every failure; one that a SIGTERM or SIGKILL of ours ended did
  // not, nor does any while the rendezvous stops the group (another node's failure, a new round).
  // The halt that a failure brings to every node, its own included, leaves a node whose attempt
  // already has a failure of its own (`failed_here`) counting as before: it stops for that one.
  bool counts_as_failure(const ExitStatus& status, bool running, bool failed_here) const;

  // In a job, once every worker of the attempt has ended: join the next round, tell the
  // rendezvous what failed after a halt, or wait at the exit barrier. Returns the node's exit
  // status when the rendezvous stopped the job (`ran`: a group was ever started), else nothing.
  std::optional<int> after_attempt_in_job(AgentActions& out, const AttemptFailures& failures,
                                          bool ran);

 private:
  int signal_ = 0;
  bool restart_ = false;
  std::optional<rendezvous::Stop> stop_;
  bool halted_ = false;  // the rendezvous asked what failed; the answer is owed once stopped
};

}  // namespace trainrun::launch
