#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "etcd_calls.hpp"
#include "etcd_keys.hpp"
#include "etcd_lease.hpp"
#include "etcd_membership.hpp"

namespace trainrun::rendezvous {

// The keys an agent writes for itself, on its lease, so that etcd deletes them when the agent
// stops renewing it: its node key (with the first read, first contact), its join, its answer,
// its done and what failed there. Separate puts, not writes to the shared state: every agent
// writes them at about the same moment, and they do not collide.
class EtcdOwnKeys {
 public:
  struct Hooks {
    // A join with what only a reply from etcd tells: this node's address where it was given
    // none, and whether it runs on etcd's own machine (the endpoint's node, node rank 0).
    std::function<NodeDescriptor(NodeDescriptor)> addressed;
    // A key of this agent's landed: the state may now be due to change.
    std::function<void()> written;
  };

  EtcdOwnKeys(EtcdCalls& calls, const EtcdKeyspace& space, const EtcdLease& lease,
              EtcdMembership& member, std::string node_id, Hooks hooks)
      : calls_(calls),
        space_(space),
        lease_(lease),
        member_(member),
        node_id_(std::move(node_id)),
        hooks_(std::move(hooks)) {}

  // This node's key and the first read (the node keys and the state), in one transaction; where
  // no state is stored yet (the first job of the run id: generation 0), the pending join goes in
  // it too. `then`: the range read (with the transaction's header), and whether the join went in.
  void first_contact(std::function<void(const nlohmann::json& range, bool joined)> then);
  // The pending join, for this node's job (`generation`): its own key, naming its job and which
  // join it is; the agent that takes it into the state writes there whether it was refused.
  void join(std::uint64_t generation);
  // A key of this node's own under `dir` (answers/, done/, ended/).
  void put(const std::string& dir, const std::string& value);

 private:
  nlohmann::json put_request(const std::string& key, const std::string& value) const;

  EtcdCalls& calls_;
  const EtcdKeyspace& space_;
  const EtcdLease& lease_;
  EtcdMembership& member_;
  std::string node_id_;
  Hooks hooks_;
};

}  // namespace trainrun::rendezvous
