#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "agent_events.hpp"
#include "store_owners.hpp"
#include "trainrun/launch/core/job.hpp"
#include "trainrun/rendezvous/client.hpp"

namespace trainrun::launch {

// On node rank 0, which serves the workers' store: the connections no worker of this node holds,
// asked of the other nodes in one roll call once as many came as the other nodes have ranks, or
// kStoreAskAfter after the first of them, whichever is first (later ones in the next call, at most
// kMaxStoreAsks per attempt). Each call's outcome is raised as StoreOwnersNamed; a node that does
// not answer within kStoreAnswerTimeout leaves its connections unnamed.
class StoreAsker {
 public:
  // Asks every other node `question` (rendezvous::RendezvousHandler::ask_others).
  using Ask = std::function<void(std::string question, rendezvous::Clock::duration bound,
                                 rendezvous::StacksDone done)>;

  StoreAsker(boost::asio::io_context& io, Ask ask, RaiseEvent raise);
  StoreAsker(const StoreAsker&) = delete;
  StoreAsker& operator=(const StoreAsker&) = delete;

  // An attempt of this node as group rank 0 starts; none is asked about for a job of one node.
  void attempt_started(const Topology& topology);
  // The attempt is over: nothing more is asked, a late answer is dropped.
  void attempt_over();
  // A connection whose client end no worker of this node holds made its first request `at_s`
  // seconds into the attempt.
  void unnamed(const StoreConnection& connection, double at_s);

 private:
  struct Pending {
    StoreConnection connection;
    double at_s = 0;
  };
  void consider();
  void ask_now();
  void answered(const std::vector<Pending>& asked, const std::vector<std::string>& answers,
                const std::vector<rendezvous::StacksMissing>& missing, const std::string& error);

  Ask ask_;
  RaiseEvent raise_;
  boost::asio::steady_timer timer_;
  std::optional<Topology> topology_;  // the attempt asked about, while it runs
  std::uint64_t generation_ = 0;      // per attempt: an answer of an earlier one is dropped
  std::vector<Pending> pending_;
  int seen_ = 0;  // connections of this attempt from no worker of this node
  int asks_ = 0;
  bool asking_ = false;
};

}  // namespace trainrun::launch
