#include "agent/agent_signals.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <vector>

using namespace trainrun::launch;

TEST_CASE("the agent takes SIGCHLD, stop and forwarded signals, each to its hook", "[agent]") {
  boost::asio::io_context io;
  AgentSignals signals(io);
  LaunchConfig c;
  c.stop_signals = {SIGTERM};
  c.forward_signals = {SIGUSR1};
  int children = 0;
  std::vector<int> received;
  bool done = false;
  // As the agent's: the job's end cancels the watch.
  signals.watch(
      c, [&] { ++children; },
      [&](AgentEvent e) {
        received.push_back(std::get<event::Signal>(e).sig);
        if (done) signals.cancel();
      });
  CHECK_FALSE(signals.received());

  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  while (children == 0) io.run_one();
  ::waitpid(child, nullptr, 0);
  CHECK(received.empty());
  CHECK_FALSE(signals.received());

  ::raise(SIGUSR1);
  while (received.empty()) io.run_one();
  CHECK(received == std::vector<int>{SIGUSR1});
  CHECK(signals.received());

  // Once the job is over it waits no more: nothing is left for the loop.
  done = true;
  ::raise(SIGTERM);
  while (received.size() < 2) io.run_one();
  CHECK(received == std::vector<int>{SIGUSR1, SIGTERM});
  io.restart();
  CHECK(io.poll() == 0);
  signals.cancel();
}
