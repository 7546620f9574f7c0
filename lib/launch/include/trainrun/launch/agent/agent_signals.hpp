#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>

#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// The signals the agent takes on its loop: SIGCHLD (a worker, or an orphan that came back to
// the subreaper, ended), the stop signals and those it forwards to the workers.
class AgentSignals {
 public:
  struct Hooks {
    std::function<void()> child;      // SIGCHLD
    std::function<void(int)> signal;  // any other
    std::function<bool()> done;       // the job is over: wait no more
  };

  explicit AgentSignals(boost::asio::io_context& io) : set_(io) {}

  // Takes SIGCHLD and `config`'s stop and forwarded signals from now on, each to its hook.
  void watch(const LaunchConfig& config, Hooks hooks);
  void cancel() { set_.cancel(); }
  // A stop or forwarded signal has reached trainrun: a stop that follows is the user's.
  bool received() const { return received_; }
  // For the console's last flush, which a stop signal cuts short.
  boost::asio::signal_set& set() { return set_; }

 private:
  void wait();

  boost::asio::signal_set set_;
  Hooks hooks_;
  bool received_ = false;
};

}  // namespace trainrun::launch
