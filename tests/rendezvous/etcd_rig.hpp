// What the tests of the etcd backend's pieces share: a real etcd (EtcdServer), a run's keyspace
// of its own in it, the requests an agent makes (EtcdCalls) and blocking ones of the test's own.
#pragma once

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "etcd_calls.hpp"
#include "etcd_client.hpp"
#include "etcd_keys.hpp"
#include "etcd_round.hpp"
#include "etcd_server.hpp"

namespace trainrun::test {

struct EtcdRig {
  explicit EtcdRig(const EtcdServer& etcd) : server(etcd), client(io, etcd.url()) {
    calls.connect(etcd.url());
  }

  // A blocking request of the test's own; etcd's answer.
  nlohmann::json post(const std::string& path, const nlohmann::json& body) {
    const rendezvous::EtcdReply r = client.post_now(path, body.dump(), std::chrono::seconds(5));
    INFO(path << ": " << r.describe());
    REQUIRE(r.ok());
    return nlohmann::json::parse(r.body);
  }
  std::int64_t grant_lease() {
    return rendezvous::etcd_int(post("/v3/lease/grant", {{"TTL", 600}, {"ID", 0}}), "ID");
  }
  void put(const std::string& key, const std::string& value, std::int64_t lease = 0) {
    post("/v3/kv/put", {{"key", rendezvous::base64_encode(key)},
                        {"value", rendezvous::base64_encode(value)},
                        {"lease", std::to_string(lease)}});
  }
  // The key's kv as etcd holds it, or null.
  nlohmann::json get(const std::string& key) {
    const nlohmann::json j = post("/v3/kv/range", {{"key", rendezvous::base64_encode(key)}});
    return j.contains("kvs") ? j.at("kvs").at(0) : nlohmann::json();
  }
  rendezvous::EtcdSnapshot read() {
    return space.snapshot(post("/v3/kv/range", space.everything()));
  }

  // Runs the agent's event loop until `done`, for 30 s at most; whether it came.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io.restart();
      io.run_for(std::chrono::milliseconds(20));
    }
    return done();
  }

  const EtcdServer& server;
  boost::asio::io_context io;
  rendezvous::EtcdClient client;
  rendezvous::RendezvousOptions options;
  rendezvous::EtcdKeyspace space{"/trainrun/test-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(++runs) + "/"};
  rendezvous::EtcdRound round{options.round, server.endpoint(), 15};
  std::optional<rendezvous::Stop> stopped;
  rendezvous::EtcdCalls calls{
      io, server.endpoint(), options,
      rendezvous::EtcdCalls::Hooks{[this] { return stopped.has_value(); },
                                   [this](rendezvous::Stop s) { stopped = s; }, [](auto&) {}}};
  static inline int runs = 0;
};

// The rig, or the test skipped with a warning where etcd is not installed.
#define ETCD_RIG(name)                                                                 \
  const trainrun::test::EtcdServer* name##_server = trainrun::test::EtcdServer::get(); \
  if (!name##_server) {                                                                \
    WARN("etcd (/usr/bin/etcd) is not available: skipped");                            \
    return;                                                                            \
  }                                                                                    \
  trainrun::test::EtcdRig name(*name##_server)

}  // namespace trainrun::test
