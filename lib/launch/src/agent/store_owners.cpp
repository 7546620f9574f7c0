#include "store_owners.hpp"

#include <fmt/format.h>

#include <limits>

#include "connection_owner.hpp"

namespace trainrun::launch {

namespace {

using boost::asio::ip::tcp;

constexpr const char* kKey = "store_owners";

const nlohmann::json& field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) throw StoreOwnersError(fmt::format("\"{}\" is missing", key));
  return *it;
}

long long integer(const nlohmann::json& value, const char* what, long long low, long long high) {
  if (!value.is_number_integer())
    throw StoreOwnersError(fmt::format("\"{}\" must be an integer", what));
  const long long n = value.get<long long>();
  if (n < low || n > high)
    throw StoreOwnersError(fmt::format("\"{}\" must be in {}..{}, not {}", what, low, high, n));
  return n;
}

tcp::endpoint endpoint(const nlohmann::json& address, const nlohmann::json& port) {
  if (!address.is_string() || address.get_ref<const std::string&>().size() > 64)
    throw StoreOwnersError("a connection's address must be a string of at most 64 bytes");
  boost::system::error_code ec;
  const auto a = boost::asio::ip::make_address(address.get_ref<const std::string&>(), ec);
  if (ec)
    throw StoreOwnersError(
        fmt::format("\"{}\" is not an IP address", address.get_ref<const std::string&>()));
  return tcp::endpoint(a, static_cast<unsigned short>(integer(port, "port", 0, 65535)));
}

}  // namespace

nlohmann::json store_owners_question(const StoreOwnersQuestion& question) {
  nlohmann::json connections = nlohmann::json::array();
  for (const auto& c : question.connections)
    connections.push_back({c.peer.address().to_string(), c.peer.port(),
                           c.local.address().to_string(), c.local.port()});
  return {{kKey, {{"restart_count", question.restart_count}, {"connections", connections}}}};
}

bool is_store_owners_question(const nlohmann::json& question) {
  return question.is_object() && question.contains(kKey);
}

StoreOwnersQuestion parse_store_owners_question(const nlohmann::json& question) {
  const nlohmann::json& q = field(question, kKey);
  if (!q.is_object()) throw StoreOwnersError("\"store_owners\" must be an object");
  StoreOwnersQuestion out;
  out.restart_count = static_cast<int>(
      integer(field(q, "restart_count"), "restart_count", 0, std::numeric_limits<int>::max()));
  const nlohmann::json& list = field(q, "connections");
  if (!list.is_array() || list.size() > kMaxStoreQuestionConnections)
    throw StoreOwnersError(fmt::format("\"connections\" must be an array of at most {}",
                                       kMaxStoreQuestionConnections));
  for (const nlohmann::json& c : list) {
    if (!c.is_array() || c.size() != 4)
      throw StoreOwnersError(
          "a connection must be [peer address, peer port, local address, local port]");
    out.connections.push_back({endpoint(c[0], c[1]), endpoint(c[2], c[3])});
  }
  return out;
}

nlohmann::json store_owners_answer(int node, int restart_count,
                                   const std::vector<StoreOwner>& owners) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& o : owners) list.push_back({{"connection", o.connection}, {"rank", o.rank}});
  return {{"node", node}, {"restart_count", restart_count}, {kKey, list}};
}

std::vector<StoreOwner> parse_store_owners_answer(const nlohmann::json& answer,
                                                  const StoreOwnersQuestion& question, int nodes,
                                                  int world_size) {
  if (!answer.is_object()) throw StoreOwnersError("an answer must be an object");
  if (!answer.contains(kKey)) {
    if (const auto e = answer.find("error"); e != answer.end() && e->is_string())
      throw StoreOwnersError(e->get<std::string>());
    return {};
  }
  const int node = static_cast<int>(integer(field(answer, "node"), "node", -1, nodes - 1));
  const auto restart_count =
      integer(field(answer, "restart_count"), "restart_count", -1, std::numeric_limits<int>::max());
  const nlohmann::json& list = field(answer, kKey);
  if (!list.is_array() || list.size() > question.connections.size())
    throw StoreOwnersError("\"store_owners\" must be an array, no longer than the question's");
  if (node < 0 || restart_count != question.restart_count) return {};
  std::vector<StoreOwner> owners;
  for (const nlohmann::json& o : list) {
    if (!o.is_object()) throw StoreOwnersError("\"store_owners\" must hold objects");
    const auto connection =
        static_cast<std::size_t>(integer(field(o, "connection"), "connection", 0,
                                         static_cast<long long>(question.connections.size()) - 1));
    const int rank = static_cast<int>(integer(field(o, "rank"), "rank", 0, world_size - 1));
    owners.push_back({connection, rank, node});
  }
  return owners;
}

nlohmann::json answer_store_owners(const StoreOwnersQuestion& question, int node,
                                   std::optional<int> restart_count, const NodeWorkers& workers) {
  std::vector<StoreOwner> owners;
  // Another attempt's workers hold other sockets: a port reused since could name the wrong rank.
  if (restart_count && *restart_count == question.restart_count)
    for (std::size_t i = 0; i < question.connections.size(); ++i)
      if (const auto rank =
              connection_rank(question.connections[i].peer, question.connections[i].local, workers))
        owners.push_back({i, *rank, node});
  return store_owners_answer(restart_count ? node : -1, restart_count.value_or(-1), owners);
}

}  // namespace trainrun::launch
