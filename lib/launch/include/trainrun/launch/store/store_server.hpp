#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/store/store_admission.hpp"
#include "trainrun/launch/store/store_data.hpp"
#include "trainrun/launch/store/store_protocol.hpp"
#include "trainrun/rendezvous/listener.hpp"
#include "trainrun/rendezvous/refusal_throttle.hpp"

namespace trainrun::launch {

// A c10d TCPStore server for torch 2.x clients on the agent's event loop (docs/protocol.md, "c10d
// store"). A connection that sends what the protocol does not allow, or breaks a bound, is
// closed with a line said; the server and its other connections go on. Everything it holds
// (data, waits, requests arriving, replies unsent) stays under StoreLimits::max_held_bytes; a
// client that does not read its replies is not served nor read until it does. Listens on every
// address, as torch's own server does, beside the HeldPort that keeps the port reserved, and
// closes at once a connection from an address its StoreAdmission does not admit.
class StoreServer {
 public:
  using Say = std::function<void(const std::string&, Level)>;
  // A connection's first whole request has come (peer and local address): once per connection,
  // before it is served, so that who reached the store when costs nothing per request.
  using FirstRequest = std::function<void(const boost::asio::ip::tcp::endpoint& peer,
                                          const boost::asio::ip::tcp::endpoint& local)>;

  StoreServer(boost::asio::io_context& io, Say say, const StoreLimits& limits = {},
              FirstRequest first_request = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Starts accepting on `port` (0: a free one). Throws SetupError when it cannot listen.
  void open(int port);
  // Who may connect from now on (loopback alone until this is called); an admission that lets
  // every address in is said once, with why.
  void admit_only(StoreAdmission admission);
  // Stops accepting; connections made stay served.
  void stop_accepting();
  // Stops accepting and closes every connection; the data stays until clear().
  void close();
  void clear();

  bool listening() const { return listener_ != nullptr; }
  int port() const { return port_; }
  std::size_t connections() const { return connections_.size(); }
  // Connections closed because the admission did not admit their address, since the start.
  std::size_t refused() const { return refused_; }
  const StoreData& data() const { return data_; }

 private:
  class Connection;
  friend class Connection;

  void admit(boost::asio::ip::tcp::socket socket);
  // Closes a connection from an address not admitted, with a line (throttled: a flood of them
  // is counted, said when the interval ends or the server closes).
  void refuse_stranger(boost::asio::ip::tcp::socket socket,
                       const boost::asio::ip::tcp::endpoint& peer);
  void release_refusals();
  void accept_failed(const boost::system::error_code& ec);
  void take(StoreClient client, StoreRequest request);
  void refuse(Connection& c, const StoreError& e);
  void drop(StoreClient client);
  // What closing connections or emptying the store gave back since `before` (bytes held).
  void freed(std::size_t before);

  boost::asio::io_context& io_;
  Say say_;
  FirstRequest first_request_;
  StoreLimits limits_;
  StoreData data_;
  StoreAdmission admission_;
  std::string open_said_;  // the last reason for admitting everyone that was said
  std::size_t refused_ = 0;
  rendezvous::RefusalThrottle refusals_;
  boost::asio::steady_timer refusal_timer_;
  std::shared_ptr<rendezvous::Listener> listener_;
  std::array<char, 64 * 1024> in_{};  // every connection reads here in turn: one loop, one read
  int port_ = 0;
  StoreClient next_client_ = 1;
  std::map<StoreClient, std::shared_ptr<Connection>> connections_;
  std::set<StoreFault> bounds_said_;  // each bound is said once
  bool connections_bound_said_ = false;
  bool accept_failure_said_ = false;
  std::size_t freed_ = 0;  // not yet given back to the system
  int malformed_said_ = 0;
};

}  // namespace trainrun::launch
