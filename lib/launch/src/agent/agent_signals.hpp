#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>

#include "agent_events.hpp"
#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// The signals the agent takes on its loop: SIGCHLD (a worker, or an orphan that came back to
// the subreaper, ended), the stop signals and those it forwards to the workers.
class AgentSignals {
 public:
  explicit AgentSignals(boost::asio::io_context& io) : set_(io) {}

  // Takes SIGCHLD (to `child`) and `config`'s stop and forwarded signals (raised as Signal) from
  // now on, until cancel().
  void watch(const LaunchConfig& config, std::function<void()> child, RaiseEvent raise);
  // The job is over: wait no more (also when called from inside `child` or `raise`).
  void cancel() {
    cancelled_ = true;
    set_.cancel();
  }
  // A stop or forwarded signal has reached trainrun: a stop that follows is the user's.
  bool received() const { return received_; }
  // For the console's last flush, which a stop signal cuts short.
  boost::asio::signal_set& set() { return set_; }

 private:
  void wait();

  boost::asio::signal_set set_;
  std::function<void()> child_;
  RaiseEvent raise_;
  bool received_ = false;
  bool cancelled_ = false;
};

}  // namespace trainrun::launch
