#pragma once

#include <boost/asio/io_context.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/store/store_server.hpp"
#include "trainrun/launch/workers/worker_env.hpp"

namespace trainrun::launch {

// Whether torchrun 2.x's agent shares its store with the workers for this command line
// (TORCHELASTIC_USE_AGENT_STORE=True): its static handler always does; its dynamic ones (c10d,
// etcd-v2, and --standalone or one node without an endpoint, which it runs as c10d on
// localhost:0) unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1; its etcd (v1) handler never.
bool torchrun2_shares_store(const LaunchConfig& config,
                            const std::map<std::string, std::string>& inherited);

// Whether trainrun's workers get TORCHELASTIC_USE_AGENT_STORE=True: as torchrun 2.x, except for
// workers whose torch client speaks the older protocol: Python workers of torch 1.x, and
// programs that are not Python (the launcher cannot tell which LibTorch they link; the C++
// runtime on LibTorch 1.13 is one). Those keep False: worker RANK 0 hosts the store.
bool uses_agent_store(const LaunchConfig& config, const JobSettings& job,
                      const std::map<std::string, std::string>& inherited);

// The agent's side of TORCHELASTIC_USE_AGENT_STORE=True: on the node of group rank 0, a c10d
// store on MASTER_PORT for the whole job. Each attempt starts with it empty; from the moment an
// attempt is stopped until the next one starts it accepts no new connection, so a worker of the
// next attempt (on any node) never meets a key of the last one, nor a late writer of it. It
// admits the round's nodes only (StoreAdmission): this machine alone in a job without a round.
class AgentStore {
 public:
  // `first_request`: each connection's first request, handed on (StoreServer::FirstRequest).
  AgentStore(boost::asio::io_context& io, StoreServer::Say say,
             StoreServer::FirstRequest first_request = {});

  // A round formed: its assignment's node addresses (this node's, when it has group rank 0),
  // whom the store admits from its next attempt on.
  void round_formed(std::vector<std::string> node_addresses);
  // Before this node starts an attempt's workers. Throws SetupError when the store cannot listen.
  void attempt_starting(const JobSettings& job, const Topology& topology);
  // The attempt's workers are being stopped (a failure, a signal, a new round).
  void attempt_stopping();
  // The job is over: nothing listens or stays connected, so that the agent's last run of its
  // event loop (the rendezvous' goodbyes) ends as soon as they are said.
  void close();

  const StoreServer* server() const { return server_.get(); }
  // Connections refused for their address, in the whole job.
  std::size_t refused_connections() const { return server_ ? server_->refused() : 0; }

 private:
  boost::asio::io_context& io_;
  StoreServer::Say say_;
  StoreServer::FirstRequest first_request_;
  std::unique_ptr<StoreServer> server_;
  std::optional<std::vector<std::string>> round_nodes_;  // none: the job has no round
};

}  // namespace trainrun::launch
