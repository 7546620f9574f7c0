#include "trainrun/launch/agent/agent_store.hpp"

#include <fmt/format.h>

#include "trainrun/launch/agent/agent_plan.hpp"

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
  if (!job.python_workers || (job.torch_major && *job.torch_major < 2)) return false;
  return torchrun2_shares_store(config, inherited);
}

AgentStore::AgentStore(boost::asio::io_context& io, StoreServer::Say say)
    : io_(io), say_(std::move(say)) {}

void AgentStore::attempt_starting(const JobSettings& job, const Topology& topology) {
  if (!job.use_agent_store) return;
  if (topology.group_rank != 0) {
    // Another node hosts this round's store (a new round may move group rank 0).
    attempt_stopping();
    return;
  }
  if (!server_) server_ = std::make_unique<StoreServer>(io_, say_);
  if (server_->listening() && port_ != topology.master_port) server_->close();
  server_->clear();
  if (!server_->listening()) {
    server_->open(topology.master_port);
    port_ = topology.master_port;
    say_(fmt::format("c10d store for the workers listening on port {}", port_), Level::debug);
  }
}

void AgentStore::attempt_stopping() {
  if (!server_) return;
  server_->close();
  server_->clear();
}

}  // namespace trainrun::launch
