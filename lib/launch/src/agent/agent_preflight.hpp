#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent_events.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/preflight/local_offer.hpp"
#include "trainrun/launch/preflight/preflight_checks.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

class PreflightListener;
class PreflightRun;

// The agent's preflight stage (--preflight): its port, open for the job's life, this node's
// offer, sent with each join, and the checks of the links, MASTER_ADDR and what every node runs,
// once the round has formed and before any worker starts: the round's assignment is raised once
// every check passed. A node that cannot open its port runs without it (the others do not check
// it), and says so.
class AgentPreflight {
 public:
  struct Hooks {
    std::function<void(const std::string&, Level)> say;
    // A check failed: `line` says which and why (the agent raises it as PreflightFailed, which
    // ends the job on every node).
    std::function<void(const std::string& line)> failed;
  };

  AgentPreflight(boost::asio::io_context& io, PreflightMode mode);
  ~AgentPreflight();
  AgentPreflight(const AgentPreflight&) = delete;
  AgentPreflight& operator=(const AgentPreflight&) = delete;

  // Opens the port and makes the offer of what this node runs; `raise` takes the Assignment of
  // each round whose checks passed.
  void open(const LocalRun& run, Hooks hooks, RaiseEvent raise);
  // This node's offer; none when it runs no preflight.
  const std::optional<rendezvous::PreflightOffer>& offer() const { return offer_; }
  // The round of `a` has formed: checks its peers as `me`, and the log directory `log_dir`.
  // False when this node has nothing to check (nothing is raised): its workers start at once.
  bool start(const rendezvous::Assignment& a, const PreflightNode& me, const std::string& log_dir);
  // A stop, restart or halt came: the running checks are dropped.
  void drop();
  // The job is over: the checks are dropped, a verdict still to come with them, and the port
  // closed (its accept would keep the rendezvous' last run of the event loop busy for the whole
  // close linger).
  void close();

 private:
  void finish(const rendezvous::Assignment& a, const PreflightNode& me,
              const std::vector<PreflightFinding>& findings, std::chrono::nanoseconds took);

  boost::asio::io_context& io_;
  PreflightMode mode_;
  Hooks hooks_;
  RaiseEvent raise_;
  std::unique_ptr<PreflightListener> listener_;
  std::optional<rendezvous::PreflightOffer> offer_;  // none: this node runs no preflight
  std::shared_ptr<PreflightRun> run_;                // while the round's preflight runs
  std::uint64_t runs_ = 0;                           // counts runs begun or dropped
};

// What this node runs, as its preflight offer names it: the entrypoint, the file behind it (the
// script, or `program` for an executable), and the workers' Python and torch versions (`python`
// and `torch`, empty for workers that do not run Python). Pure.
LocalRun preflight_local_run(const LaunchConfig& config, const std::string& program,
                             const std::string& python, const std::string& torch);

}  // namespace trainrun::launch
