#include "trainrun/rendezvous/preflight_offer.hpp"

#include <algorithm>
#include <tuple>

namespace trainrun::rendezvous {

bool PreflightOffer::operator==(const PreflightOffer& o) const {
  return std::tie(id, port, trainrun, entrypoint, sha256, python, torch, network, master_check) ==
         std::tie(o.id, o.port, o.trainrun, o.entrypoint, o.sha256, o.python, o.torch, o.network,
                  o.master_check);
}

std::vector<int> preflight_peer_ranks(int group_rank, int world) {
  std::vector<int> out;
  if (world <= 1) return out;
  for (int r : {0, (group_rank + 1) % world, (group_rank + world - 1) % world}) {
    if (r != group_rank && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

}  // namespace trainrun::rendezvous
