#include "trainrun/launch/agent/agent_signals.hpp"

#include <signal.h>

namespace trainrun::launch {

void AgentSignals::watch(const LaunchConfig& config, Hooks hooks) {
  hooks_ = std::move(hooks);
  set_.add(SIGCHLD);
  for (int sig : config.stop_signals) set_.add(sig);
  for (int sig : config.forward_signals) set_.add(sig);
  wait();
}

void AgentSignals::wait() {
  set_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (sig == SIGCHLD) {
      hooks_.child();
    } else {
      received_ = true;
      hooks_.signal(sig);
    }
    if (!hooks_.done()) wait();
  });
}

}  // namespace trainrun::launch
