#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/store/store_data.hpp"
#include "trainrun/launch/store/store_protocol.hpp"

namespace trainrun::launch {

// A c10d TCPStore server for torch 2.x clients on the agent's event loop (docs/protocol.md, "c10d
// store"). A connection that sends what the protocol does not allow, or breaks a bound, is
// closed with a line said; the server and its other connections go on. Listens on every
// address, as torch's own server does, beside the HeldPort that keeps the port reserved.
class StoreServer {
 public:
  using Say = std::function<void(const std::string&, Level)>;

  StoreServer(boost::asio::io_context& io, Say say, const StoreLimits& limits = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Starts accepting on `port` (0: a free one). Throws SetupError when it cannot listen.
  void open(int port);
  // Stops accepting; connections made stay served.
  void stop_accepting();
  // Stops accepting and closes every connection; the data stays until clear().
  void close();
  void clear() { data_.clear(); }

  bool listening() const { return acceptor_.is_open(); }
  int port() const { return port_; }
  std::size_t connections() const { return connections_.size(); }
  const StoreData& data() const { return data_; }

 private:
  class Connection;
  friend class Connection;

  void accept();
  void take(StoreClient client, const StoreRequest& request);
  void refuse(Connection& c, const StoreError& e);
  void drop(StoreClient client);

  Say say_;
  StoreLimits limits_;
  StoreData data_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  StoreClient next_client_ = 1;
  std::map<StoreClient, std::shared_ptr<Connection>> connections_;
  std::set<StoreFault> bounds_said_;  // each bound is said once
  bool connections_bound_said_ = false;
  int malformed_said_ = 0;
};

}  // namespace trainrun::launch
