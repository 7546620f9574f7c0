#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/output/console.hpp"

namespace trainrun::launch {

// The agent's stdout and stderr consoles: one Console when both are the same file (`2>&1`), so
// that a line half-written to one is not split by a line written to the other.
class AgentConsoles {
 public:
  explicit AgentConsoles(boost::asio::io_context& io);

  Console& out() { return out_; }
  Console& err() { return err_ ? *err_ : out_; }

  // One of trainrun's own lines (launcher_line), through the console while the loop runs: it
  // keeps its place among the workers' lines, and a paused reader cannot block the loop on it.
  void say(const std::string& line, Level level = Level::info);
  // say(), for the agent's pieces to call.
  std::function<void(const std::string&, Level)> sayer() {
    return [this](const std::string& line, Level level) { say(line, level); };
  }

  // The job is over: write what the consoles have not taken yet. A reader that takes nothing for
  // Console::kFlushSeconds (counted from `ended` at the earliest), or one of `stop_signals` on
  // `signals` meanwhile, ends the wait, so that a paused console never keeps trainrun from
  // exiting; the workers' log files have all of their output. Runs `io` until then.
  void flush(boost::asio::signal_set& signals, const std::vector<int>& stop_signals,
             std::chrono::steady_clock::time_point ended);

 private:
  std::vector<Console*> all();
  size_t queued();

  boost::asio::io_context& io_;
  Console out_;
  std::unique_ptr<Console> err_;  // none when stderr is stdout's file
};

}  // namespace trainrun::launch
