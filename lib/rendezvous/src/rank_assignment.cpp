#include "trainrun/rendezvous/rank_assignment.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace trainrun::rendezvous {

std::vector<Assignment> assign_ranks(const std::vector<NodeDescriptor>& nodes, std::uint64_t round,
                                     bool use_node_rank, const MasterEndpoint* fixed_master) {
  const int n = static_cast<int>(nodes.size());
  if (n == 0) throw std::invalid_argument("rank assignment: a round needs at least one node");
  // order[g] = index of the node with group rank g
  std::vector<int> order(nodes.size());
  if (use_node_rank) {
    std::fill(order.begin(), order.end(), -1);
    for (int i = 0; i < n; ++i) {
      int r = nodes[i].node_rank;
      if (r < 0 || r >= n || order[r] != -1) {
        throw std::invalid_argument(fmt::format(
            "rank assignment: node ranks must be 0..{} without repeats (got {} from host {})",
            n - 1, r, nodes[i].host));
      }
      order[r] = i;
    }
  } else {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return std::tie(nodes[a].host, nodes[a].addr, nodes[a].pid) <
             std::tie(nodes[b].host, nodes[b].addr, nodes[b].pid);
    });
  }
  long long world = 0;
  for (const auto& node : nodes) world += node.nproc;
  if (world > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("rank assignment: world size does not fit in an int");
  }
  MasterEndpoint master = fixed_master
                              ? *fixed_master
                              : MasterEndpoint{nodes[order[0]].addr, nodes[order[0]].master_port};
  std::vector<Assignment> out(nodes.size());
  int base = 0;
  for (int g = 0; g < n; ++g) {
    const NodeDescriptor& node = nodes[order[g]];
    Assignment& a = out[order[g]];
    a.round = round;
    a.group_rank = g;
    a.group_world_size = n;
    a.base_rank = base;
    a.local_world_size = node.nproc;
    a.world_size = static_cast<int>(world);
    a.master_addr = master.addr;
    a.master_port = master.port;
    base += node.nproc;
    if (!node.preflight) continue;
    for (int p : preflight_peer_ranks(g, n)) {
      const NodeDescriptor& peer = nodes[order[p]];
      if (peer.preflight) a.preflight.push_back({p, peer.host, peer.addr, *peer.preflight});
    }
  }
  return out;
}

}  // namespace trainrun::rendezvous
