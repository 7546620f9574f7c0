#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "trainrun/rendezvous/endpoint.hpp"
#include "trainrun/rendezvous/rank_assignment.hpp"
#include "trainrun/rendezvous/round_machine.hpp"

namespace trainrun::rendezvous {

// Everything the rendezvous handler needs, validated by its caller.
struct RendezvousOptions {
  bool static_backend = false;
  HostPort endpoint;  // where agents meet (static: master_addr, port rdzv_port)
  std::string run_id;
  std::optional<std::string> token;
  std::optional<bool> is_host;  // --rdzv-conf is_host; empty: decided by address and port
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  int node_rank = -1;            // static backend only
  MasterEndpoint static_master;  // static backend only: worker RANK 0's store
  std::string local_addr;        // --local-addr: advertised address; empty: derived
  Clock::duration join_timeout = std::chrono::seconds(600);
  Clock::duration last_call_timeout = std::chrono::seconds(30);
  Clock::duration keep_alive_interval = std::chrono::seconds(5);
  Clock::duration heartbeat_timeout = std::chrono::seconds(15);
  Clock::duration status_interval = std::chrono::seconds(10);
  Clock::duration handshake_timeout = std::chrono::seconds(10);
  // How long refusals are taken for a hosting agent that is starting, when this agent found the
  // local endpoint's port taken; past it the port's holder is judged not a trainrun host.
  Clock::duration refused_grace = std::chrono::seconds(3);
};

}  // namespace trainrun::rendezvous
