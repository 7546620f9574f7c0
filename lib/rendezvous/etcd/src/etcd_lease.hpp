#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "etcd_client.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// An agent's etcd lease: granted with a TTL of heartbeat_timeout (rounded up, at least 2 s),
// renewed every keep_alive_interval, revoked at a clean exit. The keys the agent writes for
// itself are put with it, so that etcd deletes them when the agent stops renewing it.
class EtcdLease {
 public:
  // The handler's request with retries while etcd is unreachable: POST `path`, then `ok` with
  // etcd's answer, or `retry` after a back-off.
  using Call = std::function<void(const std::string& path, const nlohmann::json& body,
                                  std::function<void(const nlohmann::json&)> ok,
                                  std::function<void()> retry)>;

  // `expired`: etcd says the lease is gone (no keep-alive reached it in time).
  EtcdLease(boost::asio::io_context& io, LivenessOptions liveness, Call call,
            std::function<void()> expired)
      : liveness_(liveness), call_(std::move(call)), expired_(std::move(expired)), timer_(io) {}
  ~EtcdLease() { cancel(); }

  // The lease's id once granted.
  const std::optional<std::int64_t>& id() const { return id_; }
  bool revoked() const { return revoked_; }

  void grant(std::function<void()> granted);
  // Renews it every keep_alive_interval from now on.
  void keep_alive();
  // Bounded and blocking: the agent is on its way out.
  void revoke(EtcdClient& client);
  void cancel() { timer_.cancel(); }

 private:
  LivenessOptions liveness_;
  Call call_;
  std::function<void()> expired_;
  std::optional<std::int64_t> id_;
  bool revoked_ = false;
  boost::asio::steady_timer timer_;
  // A timer that had already fired when the lease was destroyed still runs its function.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace trainrun::rendezvous
