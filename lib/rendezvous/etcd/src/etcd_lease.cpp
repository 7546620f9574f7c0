#include "etcd_lease.hpp"

#include <algorithm>
#include <cmath>

#include "etcd_keys.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;
using namespace std::chrono_literals;

void EtcdLease::grant(std::function<void()> granted) {
  const auto ttl = std::max<std::int64_t>(
      2, static_cast<std::int64_t>(std::ceil(in_seconds(liveness_.heartbeat_timeout))));
  call_(
      "/v3/lease/grant", {{"TTL", ttl}, {"ID", 0}},
      [this, granted](const json& j) {
        id_ = etcd_int(j, "ID");
        granted();
      },
      [this, granted] { grant(granted); });
}

void EtcdLease::keep_alive() {
  timer_.expires_after(liveness_.keep_alive_interval);
  timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
    if (alive.expired() || ec) return;
    call_(
        "/v3/lease/keepalive", {{"ID", std::to_string(*id_)}},
        [this](const json& j) {
          const json& result = j.contains("result") ? j.at("result") : j;
          if (etcd_int(result, "TTL") <= 0) return expired_();
          keep_alive();
        },
        [this] { keep_alive(); });
  });
}

void EtcdLease::revoke(EtcdClient& client) {
  revoked_ = true;
  client.post_now("/v3/lease/revoke", json{{"ID", std::to_string(*id_)}}.dump(), 1s);
}

}  // namespace trainrun::rendezvous
