#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "etcd_client.hpp"
#include "trainrun/rendezvous/backoff.hpp"
#include "trainrun/rendezvous/handler.hpp"

namespace trainrun::rendezvous {

// An agent's requests to etcd: on a JSON answer, what the caller does next; while etcd cannot be
// reached, the same request again after a back-off, until the rendezvous' deadline, then the job
// stops on this node; an answer that is not etcd's stops it at once. Timers armed here end with
// the agent's job (cancel()).
class EtcdCalls {
 public:
  struct Hooks {
    std::function<bool()> finished;  // the job has ended on this node: nothing more runs
    std::function<void(Stop)> fail;
    std::function<void(const std::string&)> log;
  };

  EtcdCalls(boost::asio::io_context& io, std::string endpoint, const RendezvousOptions& options,
            Hooks hooks)
      : io_(io),
        endpoint_(std::move(endpoint)),
        retry_(options.retry),
        backoff_(options.retry.backoff, join_deadline(options)),
        hooks_(std::move(hooks)) {}
  ~EtcdCalls() { cancel(); }

  void connect(const std::string& url) { client_ = std::make_unique<EtcdClient>(io_, url); }
  EtcdClient* client() { return client_.get(); }
  void disconnect() { client_.reset(); }

  // POST `path`; on a JSON answer call `ok`; while etcd cannot be reached, call `retry` after a
  // back-off, until the deadline.
  void call(const std::string& path, const nlohmann::json& body,
            std::function<void(const nlohmann::json&)> ok, std::function<void()> retry);
  // etcd could not be reached (`r`): `retry` after the back-off's wait, or give up.
  void unreachable(const EtcdReply& r, std::function<void()> retry);
  // etcd answered (a watch's line): the back-off begins again.
  void reached() { backoff_.reset(); }
  void after(Clock::duration d, std::function<void()> fn);
  void cancel();
  // The address this host reaches etcd from, once a request has told it.
  const std::string& local_ip() const { return local_ip_; }
  // etcd's address on that connection.
  const std::string& peer_ip() const { return peer_ip_; }

 private:
  boost::asio::io_context& io_;
  std::string endpoint_;
  RetryOptions retry_;
  Backoff backoff_;
  Hooks hooks_;
  std::string local_ip_, peer_ip_;
  std::optional<Clock::time_point> last_unreachable_log_;
  std::vector<std::shared_ptr<boost::asio::steady_timer>> timers_;
  // A timer that had already fired when this was destroyed still runs its function.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::unique_ptr<EtcdClient> client_;  // last: destroyed first, no callback runs after it
};

}  // namespace trainrun::rendezvous
