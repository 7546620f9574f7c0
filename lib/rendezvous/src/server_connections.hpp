#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "framed_connection.hpp"
#include "handshake.hpp"
#include "round_machine.hpp"
#include "trainrun/rendezvous/byte_budget.hpp"
#include "trainrun/rendezvous/listener.hpp"
#include "trainrun/rendezvous/server.hpp"

namespace trainrun::rendezvous {

// The rendezvous server's connections: accepting them, their handshakes, and the bounds that keep
// a flood from exhausting the server (ServerLimits: how many, the partial-frame byte budgets). What
// admitted connections say goes to the owner, which speaks for the rounds (RendezvousServer). Owned
// through shared_ptr: pending operations hold it weakly.
class ServerConnections : public std::enable_shared_from_this<ServerConnections> {
 public:
  struct Events {
    std::function<void(NodeId id)> admitted;
    // A message of an admitted connection; a join without an address gets the peer's.
    std::function<void(NodeId id, const ClientMessage& message)> received;
    // An admitted connection ended (closed, or dropped for breaking the protocol).
    std::function<void(NodeId id, const std::string& why)> lost;
    // A connection refused or dropped, of `kind`: for the log, throttled (RefusalThrottle).
    std::function<void(const std::string& kind, const std::string& line)> refused;
  };

  ServerConnections(boost::asio::io_context& io, ServerOptions options, Events events);

  // Throws boost::system::system_error when it cannot listen there (Listener::listen).
  void listen(const boost::asio::ip::tcp::endpoint& endpoint);
  boost::asio::ip::tcp::endpoint local_endpoint() const;

  void send(NodeId id, const std::string& body);
  void send_to_admitted(const std::string& body);
  // What is queued for `id` (0 when it is gone), and FramedConnection::when_drained for it.
  std::size_t queued_bytes(NodeId id) const;
  void when_drained(NodeId id, std::size_t below, std::function<void()> drained);
  // Closes after what was sent: gracefully within the close linger, or, for a peer declared
  // lost (`peer_lost`), without waiting for it.
  void close(NodeId id, bool peer_lost);
  // The admitted connection whose far end is `remote`.
  std::optional<NodeId> admitted_from(const boost::asio::ip::tcp::endpoint& remote) const;
  // Stops accepting and closes every connection at once.
  void close_all();

  std::size_t pending() const { return pending_.size(); }
  std::size_t admitted() const { return admitted_.size(); }
  const std::set<NodeId>& admitted_ids() const { return admitted_; }
  FrameBytes partial_frame_bytes() const;

 private:
  struct Peer {
    std::shared_ptr<FramedConnection> connection;
    std::optional<ServerHandshake> handshake;  // engaged until accepted
    std::shared_ptr<boost::asio::steady_timer> deadline;
    boost::asio::ip::tcp::endpoint remote;  // the peer's end of the connection, as seen here
    std::string address;                    // its IP
  };

  void on_accept(boost::asio::ip::tcp::socket socket);
  void on_frame(NodeId id, const std::string& body);
  void on_handshake(NodeId id, Peer& peer, const ClientMessage& message);
  void on_error(NodeId id, const std::string& why, bool violation);
  void drop_peer(NodeId id, const std::string& kind, const std::string& reason, bool tell = true);
  void forget(NodeId id);

  boost::asio::io_context& io_;
  ServerOptions options_;
  Events events_;
  std::shared_ptr<Listener> listener_;
  std::map<NodeId, Peer> peers_;
  std::set<NodeId> pending_;  // ordered by id, i.e. by arrival: the oldest is evicted first
  std::set<NodeId> admitted_;
  // Partial incoming frames: of connections in their handshake, and of admitted ones.
  std::shared_ptr<ByteBudget> pending_bytes_;
  std::shared_ptr<ByteBudget> admitted_bytes_;
  NodeId next_id_ = 1;
  bool closed_ = false;
};

}  // namespace trainrun::rendezvous
