#pragma once

#include <string>
#include <vector>

#include "trainrun/rendezvous/endpoint.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// Group ranks, base global ranks and sizes for one round. The result is index-aligned with
// `nodes`. Dynamic (`use_node_rank` false): each node keeps its previous round's rank
// (last_rank), the node at the endpoint takes 0, then node_rank preferences, each while below
// the node count and free; the others fill the free ranks in (host, addr, pid) order.
// MASTER_ADDR/PORT are group rank 0's advertised address and reserved port, unless
// `fixed_master` is given. Static: group rank = node_rank, which must be a permutation of
// 0..n-1 (std::invalid_argument otherwise). Restart counts are left 0 for the caller to fill in.
// A node that made a preflight offer gets the offers of the nodes it checks
// (preflight_peer_ranks). Group rank 0 gets the round's node_addresses.
std::vector<Assignment> assign_ranks(const std::vector<NodeDescriptor>& nodes, std::uint64_t round,
                                     bool use_node_rank, const MasterEndpoint* fixed_master);

// Every address `nodes` are known by, for the store that group rank 0 serves to admit: each
// node's advertised address when it is an IP address, and the address the server saw it from,
// IPv4-mapped addresses as IPv4, each once; a node known by neither gives its advertised host
// name (a name the store cannot match). In group rank order when `nodes` are. Pure.
std::vector<std::string> node_addresses(const std::vector<const NodeDescriptor*>& nodes);

}  // namespace trainrun::rendezvous
