#include "server_connections.hpp"

#include <fmt/format.h>

#include "trainrun/base/wording.hpp"
#include "trainrun/rendezvous/crypto.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

ServerConnections::ServerConnections(asio::io_context& io, ServerOptions options, Events events)
    : io_(io),
      options_(std::move(options)),
      events_(std::move(events)),
      pending_bytes_(std::make_shared<ByteBudget>(options_.limits.max_pending_frame_bytes)),
      admitted_bytes_(std::make_shared<ByteBudget>(options_.limits.max_admitted_frame_bytes)) {}

void ServerConnections::listen(const tcp::endpoint& endpoint) {
  std::weak_ptr<ServerConnections> weak = shared_from_this();
  listener_ = std::make_shared<Listener>(io_, [weak](tcp::socket socket) {
    if (auto self = weak.lock()) self->on_accept(std::move(socket));
  });
  listener_->listen(endpoint);
}

tcp::endpoint ServerConnections::local_endpoint() const { return listener_->local_endpoint(); }

void ServerConnections::on_accept(tcp::socket socket) {
  prepare_socket(socket);
  if (admitted_.size() >= options_.limits.max_admitted) {
    auto connection = std::make_shared<FramedConnection>(std::move(socket), kMaxHandshakeFrameSize,
                                                         options_.connection.reject_linger);
    events_.refused("too many connections",
                    fmt::format("refusing {}: {} already admitted", connection->peer(),
                                count_of(static_cast<long long>(admitted_.size()), "connection")));
    connection->close_now();
    return;
  }
  if (pending_.size() >= options_.limits.max_pending) {
    NodeId oldest = *pending_.begin();
    drop_peer(oldest, "handshakes crowded out", "too many connections still in their handshake",
              false);
  }
  NodeId id = next_id_++;
  error_code ec;
  auto remote = socket.remote_endpoint(ec);
  Peer peer;
  if (!ec) {
    peer.remote = remote;
    peer.address = remote.address().to_string();
  }
  peer.connection = std::make_shared<FramedConnection>(std::move(socket), kMaxHandshakeFrameSize,
                                                       options_.connection.reject_linger);
  // 32 random bytes: a nonce fresh for every connection.
  peer.handshake.emplace(options_.credentials.run_id, options_.credentials.token, random_nonce(),
                         Welcome{options_.liveness});
  peer.deadline = std::make_shared<asio::steady_timer>(io_);
  peer.deadline->expires_after(options_.connection.handshake_timeout);
  std::weak_ptr<ServerConnections> weak = shared_from_this();
  peer.deadline->async_wait([weak, id](error_code e) {
    auto self = weak.lock();
    if (e || !self || !self->pending_.count(id)) return;
    self->drop_peer(id, "handshake timeout", "handshake not completed in time", false);
  });
  peer.connection->set_budget(pending_bytes_);
  auto connection = peer.connection;
  peers_.emplace(id, std::move(peer));
  pending_.insert(id);
  connection->start(
      [weak, id](std::string body) {
        if (auto self = weak.lock()) self->on_frame(id, body);
      },
      [weak, id](const std::string& why, bool violation) {
        if (auto self = weak.lock()) self->on_error(id, why, violation);
      });
}

// Closes a connection the owner does not know (or has already forgotten). `tell`: say why to the
// peer; without it the peer sees a plain close, which a client retries.
void ServerConnections::drop_peer(NodeId id, const std::string& kind, const std::string& reason,
                                  bool tell) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  events_.refused(
      kind, fmt::format("closing connection from {}: {}", it->second.connection->peer(), reason));
  if (tell) {
    it->second.connection->send(encode(ServerMessage{Reject{reason}}));
    it->second.connection->close_gracefully(options_.connection.reject_linger);
  } else {
    it->second.connection->close_now();  // nothing to deliver: no reason to wait
  }
  forget(id);
}

void ServerConnections::forget(NodeId id) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  if (it->second.deadline) it->second.deadline->cancel();
  peers_.erase(it);
  pending_.erase(id);
  admitted_.erase(id);
}

void ServerConnections::on_error(NodeId id, const std::string& why, bool violation) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  bool was_admitted = admitted_.count(id) > 0;
  if (violation) {
    drop_peer(id, "protocol error", why);
  } else {
    if (it->second.connection->over_budget()) {
      events_.refused("byte budget used up", fmt::format("closed connection from {}: {}",
                                                         it->second.connection->peer(), why));
    }
    forget(id);
  }
  if (was_admitted) events_.lost(id, why);
}

void ServerConnections::on_frame(NodeId id, const std::string& body) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  Peer& peer = it->second;
  ClientMessage message;
  try {
    message = decode_client_message(body);
  } catch (const ProtocolError& e) {
    bool was_admitted = admitted_.count(id) > 0;
    drop_peer(id, "protocol error", fmt::format("protocol error: {}", e.what()));
    if (was_admitted) events_.lost(id, e.what());
    return;
  }
  if (peer.handshake) return on_handshake(id, peer, message);
  if (auto* join = std::get_if<Join>(&message)) {
    if (join->node.addr.empty()) join->node.addr = peer.address;
    // For the job's store, which admits the round's nodes by address (IPv4 as IPv4).
    if (!peer.address.empty()) {
      auto seen = peer.remote.address();
      if (seen.is_v6() && seen.to_v6().is_v4_mapped())
        seen = asio::ip::make_address_v4(asio::ip::v4_mapped, seen.to_v6());
      join->node.seen_addr = seen.to_string();
    }
  }
  events_.received(id, message);
}

void ServerConnections::on_handshake(NodeId id, Peer& peer, const ClientMessage& message) {
  ServerHandshake::Step step = peer.handshake->on_message(message);
  if (step.keys) peer.connection->authenticate(std::move(*step.keys));
  if (step.outcome == HandshakeOutcome::rejected) {
    events_.refused(step.kind,
                    fmt::format("rejected {}: {}", peer.connection->peer(), step.reason));
    peer.connection->send(encode(*step.reply));
    peer.connection->close_gracefully(options_.connection.reject_linger);
    forget(id);
    return;
  }
  if (step.reply) peer.connection->send(encode(*step.reply));
  if (step.outcome == HandshakeOutcome::accepted) {
    peer.handshake.reset();
    peer.deadline->cancel();
    peer.connection->set_max_frame(kMaxFrameSize);
    peer.connection->set_budget(admitted_bytes_);
    pending_.erase(id);
    admitted_.insert(id);
    events_.admitted(id);
  }
}

void ServerConnections::send(NodeId id, const std::string& body) {
  auto it = peers_.find(id);
  if (it != peers_.end()) it->second.connection->send(body);
}

std::size_t ServerConnections::queued_bytes(NodeId id) const {
  auto it = peers_.find(id);
  return it == peers_.end() ? 0 : it->second.connection->queued_bytes();
}

void ServerConnections::when_drained(NodeId id, std::size_t below, std::function<void()> drained) {
  auto it = peers_.find(id);
  if (it != peers_.end()) it->second.connection->when_drained(below, std::move(drained));
}

void ServerConnections::send_to_admitted(const std::string& body) {
  for (NodeId id : admitted_) peers_.at(id).connection->send(body);
}

void ServerConnections::close(NodeId id, bool peer_lost) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  if (peer_lost) {
    // Peers declared lost get no linger: they would never answer.
    it->second.connection->abandon();
  } else {
    it->second.connection->close_gracefully(options_.connection.close_linger);
  }
  forget(id);
}

std::optional<NodeId> ServerConnections::admitted_from(const tcp::endpoint& remote) const {
  std::optional<NodeId> found;
  for (NodeId id : admitted_) {
    if (peers_.at(id).remote == remote) found = id;
  }
  return found;
}

void ServerConnections::close_all() {
  if (closed_) return;
  closed_ = true;
  if (listener_) listener_->close();
  // The job's last messages went out (with their linger) when they were decided; what is left is
  // connections with nothing owed, some perhaps to stopped peers that would never acknowledge a
  // graceful close: close them at once.
  for (auto& [id, peer] : peers_) {
    if (peer.deadline) peer.deadline->cancel();
    peer.connection->abandon();
  }
  peers_.clear();
  pending_.clear();
  admitted_.clear();
}

FrameBytes ServerConnections::partial_frame_bytes() const {
  return {pending_bytes_->used(), pending_bytes_->peak(), admitted_bytes_->used(),
          admitted_bytes_->peak()};
}

}  // namespace trainrun::rendezvous
