#include "agent_signals.hpp"

#include <signal.h>

namespace trainrun::launch {

void AgentSignals::watch(const LaunchConfig& config, std::function<void()> child,
                         RaiseEvent raise) {
  child_ = std::move(child);
  raise_ = std::move(raise);
  set_.add(SIGCHLD);
  for (int sig : config.stop_signals) set_.add(sig);
  for (int sig : config.forward_signals) set_.add(sig);
  wait();
}

void AgentSignals::wait() {
  set_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (sig == SIGCHLD) {
      child_();
    } else {
      received_ = true;
      raise_(event::Signal{sig});
    }
    if (!cancelled_) wait();
  });
}

}  // namespace trainrun::launch
