#include "agent_store.hpp"

#include <fmt/format.h>

#include "agent_plan.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/store/store_limits.hpp"
#include "trainrun/launch/workers/descriptors.hpp"

namespace trainrun::launch {

bool torchrun2_shares_store(const LaunchConfig& config,
                            const std::map<std::string, std::string>& inherited) {
  if (config.rdzv_backend == RendezvousBackend::etcd) return false;
  const bool dynamic =
      config.rdzv_backend != RendezvousBackend::static_ || standalone_in_torchrun(config);
  if (!dynamic) return true;
  const auto it = inherited.find("TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
  return it == inherited.end() || it->second != "1";
}

bool uses_agent_store(const LaunchConfig& config, const JobSettings& job,
                      const std::map<std::string, std::string>& inherited) {
  if (!job.python_workers || (job.torch && job.torch->major < 2)) return false;
  return torchrun2_shares_store(config, inherited);
}

AgentStore::AgentStore(boost::asio::io_context& io, StoreServer::Say say,
                       StoreServer::FirstRequest first_request)
    : io_(io), say_(std::move(say)), first_request_(std::move(first_request)) {}

void AgentStore::round_formed(std::vector<std::string> node_addresses) {
  round_nodes_ = std::move(node_addresses);
}

void AgentStore::attempt_starting(const JobSettings& job, const Topology& topology) {
  if (!job.use_agent_store) return;
  // Every worker of the last attempt, on every node, has ended: the round that starts this one
  // formed only once each node had stopped its own. Their connections and keys go.
  if (server_) {
    server_->close();
    server_->clear();
  }
  // Another node hosts this round's store (a new round may move group rank 0).
  if (topology.group_rank != 0) return;
  if (!server_) server_ = std::make_unique<StoreServer>(io_, say_, StoreLimits{}, first_request_);
  // This machine's addresses are the node's own: its workers may reach MASTER_ADDR by any.
  const std::vector<std::string> own = this_machine_addresses();
  server_->admit_only(round_nodes_ ? StoreAdmission::round(*round_nodes_, own)
                                   : StoreAdmission::this_machine(own));
  server_->open(topology.master_port);
  if (topology.restart_count == 0) {
    say_(fmt::format("c10d store for the workers listening on port {}", server_->port()),
         Level::debug);
    // Said at the start, not as failed accepts in the middle of the job.
    if (auto line = store_descriptor_shortfall(static_cast<std::size_t>(topology.world_size),
                                               static_cast<std::size_t>(topology.local_world_size)))
      say_(*line, Level::warning);
    if (auto line = store_backlog_shortfall(static_cast<std::size_t>(topology.world_size)))
      say_(*line, Level::warning);
  }
}

void AgentStore::attempt_stopping() {
  // No worker of the next attempt may connect before the store is emptied for it; the workers
  // being stopped keep their connections (a handler of the stop signal may still use the store).
  if (server_) server_->stop_accepting();
}

void AgentStore::close() {
  if (server_) server_->close();
}

}  // namespace trainrun::launch
