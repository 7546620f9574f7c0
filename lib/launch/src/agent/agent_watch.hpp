#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "agent_events.hpp"
#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/rollcall/hang_watch.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"

namespace trainrun::launch {

// What a hang confirmed under --hang-timeout=`timeout_s` prints: why, then the roll call. Pure.
std::string hang_text(const HangReport& report, double timeout_s);

// The hang of `text` (hang_text) confirmed on `host` at `unix_now`; `report_file`: where the
// report was written, empty when it could not be. Pure.
HangFailure hang_failure(const HangReport& report, std::string text, const std::string& host,
                         double unix_now, const std::string& report_file = {});

// What the agent offers to see into its running job: the roll call that `trainrun --stacks`
// finds it by (this node's stacks, and through the rendezvous the other nodes'), and with
// --hang-timeout the watch that confirms a hang with it. A job whose roll call cannot start still
// runs without it, and says so; with --hang-timeout it is refused (SetupError) instead. A hang it
// confirms is written out and raised as HangConfirmed.
class AgentWatch {
 public:
  struct Hooks {
    // This node's running workers (NodeWorkers::quiet_s is the watch's to fill in).
    std::function<NodeWorkers()> workers;
    std::function<void(const std::string&, Level)> say;
  };

  // Registers `entry` in the user's registry directory (RegistryDir, from `env`); with
  // `hang_timeout_s` > 0, watches for a hang, the workers touching `heartbeat_file` (written empty
  // now) as a sign of life.
  AgentWatch(boost::asio::io_context& io, const std::map<std::string, std::string>& env,
             JobEntry entry, double hang_timeout_s, const std::string& heartbeat_file, Hooks hooks,
             RaiseEvent raise);
  ~AgentWatch();
  AgentWatch(const AgentWatch&) = delete;
  AgentWatch& operator=(const AgentWatch&) = delete;

  // The heartbeat file the workers touch; empty without a hang watch, or when it was not made.
  const std::string& heartbeat_file() const { return heartbeat_file_; }
  bool watching() const { return hang_watch_ != nullptr; }
  // A worker's sign of life: output, a file-timer request.
  void progress();
  // Quiet for the timeout, or confirmed hung: a stop for a failure begins with SIGABRT.
  bool suspected() const;

  void set_node_rank(int node_rank);
  // How the roll call reaches the other nodes (the rendezvous).
  void set_ask_others(RollCall::AskOthers ask);
  // This node's answer to another node's `trainrun --stacks`, at most `max_bytes`.
  void answer(std::function<void(std::string)> reply, std::size_t max_bytes);

  // A group started: a hang confirmed is written to `report_file` and raised.
  void start(std::string report_file);
  // The group is being stopped, or none runs: no hang is looked for.
  void stop();
  // The job is over: the roll call stops listening.
  void close();
  // The stack dumps that no person asked for (RollCall::unasked_dumps).
  std::vector<std::string> unasked_dumps() const;

 private:
  void start_hang_watch(boost::asio::io_context& io, double timeout_s);
  void on_hang(const HangReport& report);
  NodeWorkers workers() const;

  Hooks hooks_;
  RaiseEvent raise_;
  std::string host_;
  std::string report_file_;                // the running attempt's
  std::unique_ptr<RegistryDir> registry_;  // outlives the roll call's files in it
  std::unique_ptr<RollCall> roll_call_;
  std::unique_ptr<HangWatch> hang_watch_;
  std::string heartbeat_file_;
};

}  // namespace trainrun::launch
