#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace trainrun::rendezvous {

// What one request to etcd's JSON gateway came back with.
struct EtcdReply {
  bool transport_ok = false;  // a whole HTTP answer arrived
  long http_status = 0;
  std::string body;
  std::string error;     // why, when !transport_ok (curl's wording)
  std::string local_ip;  // this end of the connection
  std::string peer_ip;   // etcd's end
  bool ok() const { return transport_ok && http_status == 200; }
  // No answer, or one that says "not now" rather than "not etcd": a server error or unavailable
  // (5xx), too many requests (429), and 408, which etcd's HTTP gateway gives while it shuts down
  // or starts ("grpc: the client connection is closing"). Worth asking again later.
  bool transient() const {
    return !transport_ok || http_status == 408 || http_status == 429 || http_status >= 500;
  }
  // One line for messages: the error, or the status and the body's start.
  std::string describe() const;
};

// HTTP to etcd's v3 gRPC gateway (POST /v3/...), with Boost.Beast on one thread of its own. A
// request goes on a connection an earlier one left open where there is one (etcd's gateway
// spends more on a new connection than on a small request); a watch has one of its own. Replies and
// stream lines are posted to `io`: every callback runs on the caller's event loop, never after the
// client is destroyed.
class EtcdClient {
 public:
  using Reply = std::function<void(EtcdReply)>;
  using Line = std::function<void(const std::string&)>;

  // `base_url`: "http://host:port".
  EtcdClient(boost::asio::io_context& io, std::string base_url);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  void post(const std::string& path, std::string body, std::chrono::milliseconds timeout,
            Reply done);
  // A streaming request (/v3/watch): each newline-terminated JSON object goes to `line`, then
  // `done` once the stream ends (etcd gone, or cancel_streams()).
  void stream(const std::string& path, std::string body, Line line, Reply done);
  void cancel_streams();
  // The same request on the calling thread, blocking up to `timeout` (the last words at exit).
  EtcdReply post_now(const std::string& path, const std::string& body,
                     std::chrono::milliseconds timeout) const;

  const std::string& base_url() const { return base_url_; }

 private:
  struct Impl;
  std::string base_url_;
  std::shared_ptr<Impl> impl_;
};

std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);  // invalid characters are skipped

}  // namespace trainrun::rendezvous
