#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>

namespace trainrun::rendezvous {

// Accepts TCP connections until closed; when accepting fails (EMFILE and friends) it backs off
// briefly instead of spinning, and tells `on_failed` when given. Owned through shared_ptr: a
// pending accept keeps it alive until close().
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  using Accepted = std::function<void(boost::asio::ip::tcp::socket socket)>;
  using Failed = std::function<void(const boost::system::error_code& ec)>;

  Listener(boost::asio::io_context& io, Accepted on_accepted, Failed on_failed = {});

  // Binds (SO_REUSEADDR, FD_CLOEXEC) and listens. Throws boost::system::system_error on failure.
  void listen(const boost::asio::ip::tcp::endpoint& endpoint);
  // Accepts on `acceptor`, already listening (its addresses chosen elsewhere); FD_CLOEXEC is set.
  void listen(boost::asio::ip::tcp::acceptor acceptor);
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  void close();

 private:
  void accept_next();

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  Accepted on_accepted_;
  Failed on_failed_;
  bool closed_ = false;
};

}  // namespace trainrun::rendezvous
