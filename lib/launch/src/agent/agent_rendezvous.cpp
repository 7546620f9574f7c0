#include "agent_rendezvous.hpp"

#include <fmt/format.h>

#include <chrono>

#include "agent_plan.hpp"
#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

int preferred_rank(const LaunchConfig& config) {
  return config.node_rank_given && config.rdzv_backend != RendezvousBackend::static_
             ? config.node_rank
             : -1;
}

AgentRendezvous::AgentRendezvous(boost::asio::io_context& io, const LaunchConfig& config,
                                 std::string host, Say say)
    : io_(io), config_(config), host_(std::move(host)), say_(std::move(say)) {}

void AgentRendezvous::start(const rendezvous::TcpRendezvousOptions& options, RaiseEvent raise,
                            StacksAsk stacks_ask) {
  handler_ = make_rendezvous(io_, config_, options, say_);
  rendezvous::ClientEvents events;
  events.on_assignment = [this, raise](const rendezvous::Assignment& a) {
    announce_node(a);
    const std::string not_free = preference_line(a, preferred_rank(config_));
    if (!not_free.empty()) say_(not_free);
    raise(event::RoundFormed{a});
  };
  events.on_restart = [raise](const rendezvous::Restart& r) { raise(event::Restart{r}); };
  events.on_halt = [raise](const rendezvous::Halt& h) { raise(event::Halt{h}); };
  events.on_stop = [raise](const rendezvous::Stop& stop) { raise(event::Stop{with_hint(stop)}); };
  events.on_stacks_ask = std::move(stacks_ask);
  try {
    handler_->start(std::move(events));
  } catch (const rendezvous::HostingError& e) {
    throw SetupError(fmt::format("{}; {}", e.what(), hosting_hint(config_)));
  } catch (const std::runtime_error& e) {
    throw SetupError(e.what());
  }
}

void AgentRendezvous::join(int master_port, int last_rank,
                           std::optional<rendezvous::PreflightOffer> offer) {
  rendezvous::RendezvousHandler::JoinRequest request;
  request.nproc = config_.nproc_per_node.number;
  request.master_port = master_port;
  request.preferred_rank = preferred_rank(config_);
  request.last_rank = last_rank;
  request.preflight = std::move(offer);
  handler_->join(request);
}

void AgentRendezvous::ask_others(
    std::function<void(nlohmann::json nodes, nlohmann::json missing, std::string error)> done) {
  if (!handler_)
    return done(nlohmann::json::array(), nlohmann::json::array(),
                "this node has left the rendezvous");
  handler_->request_stacks([done](std::vector<std::string> answers,
                                  std::vector<rendezvous::StacksMissing> missing,
                                  std::string error) {
    nlohmann::json nodes = nlohmann::json::array(), absent = nlohmann::json::array();
    // Decoded once already (a JSON object each): parsing cannot fail here.
    for (const auto& answer : answers) nodes.push_back(nlohmann::json::parse(answer));
    for (const auto& m : missing) absent.push_back({{"host", m.host}, {"reason", m.reason}});
    done(std::move(nodes), std::move(absent), std::move(error));
  });
}

void AgentRendezvous::leave() {
  handler_.reset();
  io_.restart();
  io_.run_for(std::chrono::seconds(5));
}

// Once per job, on a multi-node job: which node this is and the address the others reach it by.
void AgentRendezvous::announce_node(const rendezvous::Assignment& a) {
  if (announced_ || (a.group_world_size <= 1 && config_.max_nodes <= 1)) return;
  announced_ = true;
  say_(node_line(a, host_, handler_->advertised_address()));
}

}  // namespace trainrun::launch
