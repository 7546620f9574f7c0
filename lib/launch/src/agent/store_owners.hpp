#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainrun/launch/rollcall/roll_call.hpp"

namespace trainrun::launch {

// Node rank 0's agent serves the workers' c10d store and traces each connection to its own
// workers (connection_owner); a connection from another node is traced by that node's agent, asked
// through the roll call with a question (docs/protocol.md, "The store's connections"): the
// connections' endpoints as node 0 sees them, which are the client sockets' own on that node.

// A connection to the store: the client's end and the store's, as the store sees them.
struct StoreConnection {
  boost::asio::ip::tcp::endpoint peer;
  boost::asio::ip::tcp::endpoint local;
};

// The most connections one question names (about 110 bytes each: it stays far below
// rendezvous::kMaxQuestionBytes).
inline constexpr std::size_t kMaxStoreQuestionConnections = 1024;

// A question or an answer that does not follow docs/protocol.md: what is wrong with it.
class StoreOwnersError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StoreOwnersQuestion {
  int restart_count = 0;  // the attempt whose connections these are
  std::vector<StoreConnection> connections;
};

// {"store_owners": {"restart_count": N, "connections": [[peer_addr, peer_port, local_addr,
// local_port], ...]}}. Pure.
nlohmann::json store_owners_question(const StoreOwnersQuestion& question);
// Whether a roll call's question is this one (else it is another, or the stacks).
bool is_store_owners_question(const nlohmann::json& question);
// Throws StoreOwnersError. Pure.
StoreOwnersQuestion parse_store_owners_question(const nlohmann::json& question);

// One connection named by the node whose worker holds its client end.
struct StoreOwner {
  std::size_t connection = 0;  // its index in the question
  int rank = 0;
  int node = 0;  // the answering node's group rank
};

// {"node": N, "restart_count": N, "store_owners": [{"connection": I, "rank": R}, ...]}. Pure.
nlohmann::json store_owners_answer(int node, int restart_count,
                                   const std::vector<StoreOwner>& owners);
// The owners an answer names for `question`; an answer that says nothing of it (another attempt,
// a node that had no workers, an {"error"}) names none. Throws StoreOwnersError when it breaks the
// protocol: a field missing or of the wrong type, a connection or rank out of range (`nodes`,
// `world_size`: the attempt's). Pure.
std::vector<StoreOwner> parse_store_owners_answer(const nlohmann::json& answer,
                                                  const StoreOwnersQuestion& question, int nodes,
                                                  int world_size);

// This node's answer to `question`: the connections whose client end one of `workers` holds, when
// they run the attempt asked about (`restart_count`, none: no attempt runs here).
nlohmann::json answer_store_owners(const StoreOwnersQuestion& question, int node,
                                   std::optional<int> restart_count, const NodeWorkers& workers);

}  // namespace trainrun::launch
