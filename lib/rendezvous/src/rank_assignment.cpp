#include "rank_assignment.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <tuple>

namespace trainrun::rendezvous {
namespace {

// `text` as an IP address in its usual form (an IPv4-mapped one as IPv4); nothing for a name.
std::optional<std::string> ip_address(const std::string& text) {
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(text, ec);
  if (ec) return std::nullopt;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  return a.to_string();
}

// order[g] = the node with group rank g. Claims are taken in turn, each only for a rank below
// the node count and still free: the rank a node had in the previous round (ranks stay put),
// then 0 for the node at the endpoint, then each --node-rank preference; the rest fill the free
// ranks from the lowest. Among equal claims the order of (host, addr, pid) decides.
std::vector<int> dynamic_order(const std::vector<NodeDescriptor>& nodes) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> by_name(nodes.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::stable_sort(by_name.begin(), by_name.end(), [&](int a, int b) {
    return std::tie(nodes[a].host, nodes[a].addr, nodes[a].pid) <
           std::tie(nodes[b].host, nodes[b].addr, nodes[b].pid);
  });
  std::vector<int> order(nodes.size(), -1);
  std::vector<bool> placed(nodes.size(), false);
  auto claim = [&](int i, int rank) {
    if (placed[i] || rank < 0 || rank >= n || order[rank] != -1) return;
    order[rank] = i;
    placed[i] = true;
  };
  for (int i : by_name) claim(i, nodes[i].last_rank);
  for (int i : by_name) {
    if (nodes[i].at_endpoint) claim(i, 0);
  }
  for (int i : by_name) claim(i, nodes[i].node_rank);
  int free = 0;
  for (int i : by_name) {
    if (placed[i]) continue;
    while (order[free] != -1) ++free;
    order[free] = i;
  }
  return order;
}

}  // namespace

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
    order = dynamic_order(nodes);
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
  // Group rank 0 waits on MASTER_PORT for every node that will check it.
  const auto checks_master = [&](int g) {
    const auto& offer = nodes[order[g]].preflight;
    return offer && offer->master_check;
  };
  if (checks_master(0))
    for (int g = 1; g < n; ++g) out[order[0]].master_port_checks += checks_master(g) ? 1 : 0;
  std::vector<const NodeDescriptor*> ranked;
  for (int i : order) ranked.push_back(&nodes[i]);
  out[order[0]].node_addresses = node_addresses(ranked);
  return out;
}

std::vector<std::string> node_addresses(const std::vector<const NodeDescriptor*>& nodes) {
  std::vector<std::string> out;
  const auto add = [&](const std::string& a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const NodeDescriptor* node : nodes) {
    const auto advertised = ip_address(node->addr);
    const auto seen = ip_address(node->seen_addr);
    if (advertised) add(*advertised);
    if (seen) add(*seen);
    if (!advertised && !seen && !node->addr.empty()) add(node->addr);
  }
  return out;
}

}  // namespace trainrun::rendezvous
