#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent_events.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"
#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/handler.hpp"

namespace trainrun::launch {

// The agent's side of the rendezvous: the configured backend's handler on the agent's loop, and
// what the agent says and asks of it beyond the policy's reports: which node this is, once; why
// its --node-rank was not given; the joins; the other nodes' stacks for `trainrun --stacks`. Its
// decisions for the job (a round formed, restart, halt, stop) are raised as events.
class AgentRendezvous {
 public:
  using Say = std::function<void(const std::string&)>;
  // Another node asks for this node's stacks, or a question
  // (rendezvous::ClientEvents::on_stacks_ask).
  using StacksAsk =
      std::function<void(std::string question, std::function<void(std::string answer)> reply)>;

  // `host`: this machine's name in the node line.
  AgentRendezvous(boost::asio::io_context& io, const LaunchConfig& config, std::string host,
                  Say say);
  AgentRendezvous(const AgentRendezvous&) = delete;
  AgentRendezvous& operator=(const AgentRendezvous&) = delete;

  // Starts the handler, raising its decisions; each assignment is announced first, and each stop
  // comes with its hint (with_hint). Throws SetupError when this node must host the rendezvous
  // and cannot.
  void start(const rendezvous::TcpRendezvousOptions& options, RaiseEvent raise,
             StacksAsk stacks_ask);
  // Joins the next round, holding `master_port` for worker RANK 0's store; `last_rank`: this
  // node's rank in the previous round (-1: none).
  void join(int master_port, int last_rank, std::optional<rendezvous::PreflightOffer> offer);
  // The other nodes' answers for `trainrun --stacks` (RollCall::AskOthers).
  void ask_others(
      std::function<void(nlohmann::json nodes, nlohmann::json missing, std::string error)> done);
  rendezvous::RendezvousHandler& handler() { return *handler_; }
  // The job is over for this node. Closing its connection lets a server it hosts finish at once;
  // then the loop runs until the server's last messages have reached the other nodes (bounded).
  // Asking the others then answers that this node has left.
  void leave();

 private:
  void announce_node(const rendezvous::Assignment& a);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  std::string host_;
  Say say_;
  std::unique_ptr<rendezvous::RendezvousHandler> handler_;
  bool announced_ = false;
};

// A dynamic job's --node-rank asks for a node rank (-1: none); a static job's is the node rank.
int preferred_rank(const LaunchConfig& config);

}  // namespace trainrun::launch
