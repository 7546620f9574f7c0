#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "trainrun/rendezvous/backoff.hpp"
#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// A client's way to the rendezvous endpoint: resolves and connects, each attempt bounded by
// connection.attempt_timeout, and tries again with back-off (Backoff) until the deadline. A
// connection lost before it was admitted comes back through retry() and counts against the same
// deadline. Ends in a connected socket each time, or in one Stop saying why it gave up.
// Owned through shared_ptr: pending operations hold it weakly.
class Connector : public std::enable_shared_from_this<Connector> {
 public:
  using Connected = std::function<void(boost::asio::ip::tcp::socket socket)>;
  using GaveUp = std::function<void(const Stop& stop)>;

  Connector(boost::asio::io_context& io, ClientOptions options, Connected on_connected,
            GaveUp on_gave_up);

  // The series of attempts begins; the deadline counts from now.
  void start();
  // The last connection failed after it was made (`why`): try again, no later than `by`.
  void retry(const std::string& why, std::optional<Clock::time_point> by = std::nullopt);
  // Nothing more is tried and no callback comes.
  void cancel();

  std::string endpoint() const;
  // TCP connections made so far.
  int connections() const { return connections_; }

 private:
  void attempt();
  void on_connect_failed(const boost::system::error_code& ec);
  void give_up(const Stop& stop);

  boost::asio::io_context& io_;
  ClientOptions options_;
  Connected on_connected_;
  GaveUp on_gave_up_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::steady_timer timer_;
  std::unique_ptr<boost::asio::ip::tcp::socket> socket_;
  Backoff backoff_;
  Clock::time_point started_at_;
  std::optional<Clock::time_point> last_retry_log_;
  bool active_ = false;  // an attempt or a wait is under way
  bool attempt_timed_out_ = false;
  int connections_ = 0;
};

// Why a client gives up at its deadline: never connected (Refusal::unreachable), or connected
// `connections` times without completing a handshake (Refusal::no_handshake). `tried`: every
// distinct failure (Backoff::summary).
Stop unreachable_stop(const std::string& endpoint, Clock::duration deadline, int connections,
                      const std::string& tried);

}  // namespace trainrun::rendezvous
