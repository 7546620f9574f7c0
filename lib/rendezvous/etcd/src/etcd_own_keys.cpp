#include "etcd_own_keys.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include "etcd_client.hpp"
#include "trainrun/base/system.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;

json EtcdOwnKeys::put_request(const std::string& key, const std::string& value) const {
  return {{"key", base64_encode(key)},
          {"value", base64_encode(value)},
          {"lease", std::to_string(*lease_.id())}};
}

void EtcdOwnKeys::first_contact(std::function<void(const json& range, bool joined)> then) {
  json compare = {{"key", base64_encode(space_.state())},
                  {"target", "CREATE"},
                  {"result", "EQUAL"},
                  {"create_revision", "0"}};
  const json node_key = {
      {"request_put",
       put_request(space_.nodes() + node_id_, fmt::format("{} pid {}", host_name(), ::getpid()))}};
  const json range = {{"request_range", space_.nodes_and_state()}};
  json first = json::array({node_key}), otherwise = json::array({node_key, range});
  if (member_.pending_join()) {
    const NodeDescriptor node = hooks_.addressed(*member_.pending_join());
    first.push_back(
        {{"request_put", put_request(space_.joins() + node_id_,
                                     encode_join(EtcdJoin{0, member_.join_seq(), node, 0}))}});
  }
  first.push_back(range);
  const std::uint64_t seq = member_.join_seq();
  calls_.call(
      "/v3/kv/txn",
      {{"compare", json::array({compare})}, {"success", first}, {"failure", otherwise}},
      [this, seq, then](const json& j) {
        // The join written is this agent's latest: join() was not called again meanwhile.
        const bool joined =
            j.value("succeeded", false) && member_.pending_join() && member_.join_seq() == seq;
        if (joined) member_.take_join();
        json reply = j.at("responses").back().at("response_range");
        reply["header"] = j.at("header");
        then(reply, joined);
      },
      [this, then] { first_contact(then); });
}

void EtcdOwnKeys::join(std::uint64_t generation) {
  std::optional<NodeDescriptor> node = member_.take_join();
  if (!node) return;
  put(space_.joins(),
      encode_join(EtcdJoin{generation, member_.join_seq(), hooks_.addressed(*node), 0}));
}

void EtcdOwnKeys::put(const std::string& dir, const std::string& value) {
  calls_.call(
      "/v3/kv/put", put_request(dir + node_id_, value), [this](const json&) { hooks_.written(); },
      [this, dir, value] { put(dir, value); });
}

}  // namespace trainrun::rendezvous
