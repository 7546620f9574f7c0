#include "trainrun/rendezvous/server.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <boost/asio/steady_timer.hpp>
#include <map>
#include <set>

#include "trainrun/rendezvous/crypto.hpp"
#include "trainrun/rendezvous/framed_connection.hpp"
#include "trainrun/rendezvous/handshake.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
}  // namespace

struct RendezvousServer::Impl : std::enable_shared_from_this<Impl> {
  struct Peer {
    std::shared_ptr<FramedConnection> connection;
    std::optional<ServerHandshake> handshake;  // engaged until accepted
    std::shared_ptr<asio::steady_timer> deadline;
    tcp::endpoint remote;  // the peer's end of the connection, as this server sees it
    std::string address;   // its IP
  };

  Impl(asio::io_context& io, ServerOptions options)
      : io_(io),
        options_(std::move(options)),
        acceptor_(io),
        machine_(options_.round, options_.liveness, options_.endpoint, Clock::now()),
        round_timer_(io),
        keep_alive_timer_(io),
        accept_retry_timer_(io),
        pending_bytes_(std::make_shared<ByteBudget>(options_.limits.max_pending_frame_bytes)),
        admitted_bytes_(std::make_shared<ByteBudget>(options_.limits.max_admitted_frame_bytes)),
        refusal_timer_(io) {}

  void log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  // Connection-level refusals can come by the thousand (a flood): one line per interval. What
  // the limit held back is counted by `kind` and said when the interval ends, so that a wrong
  // token among a flood is never hidden.
  void log_refusal(const std::string& kind, const std::string& line) {
    auto now = Clock::now();
    if (last_refusal_log_ && now - *last_refusal_log_ < options_.limits.refusal_log_interval) {
      if (suppressed_refusals_.empty() && !closed_) {
        refusal_timer_.expires_at(*last_refusal_log_ + options_.limits.refusal_log_interval);
        refusal_timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
          if (auto self = weak.lock(); self && !ec) self->report_suppressed_refusals();
        });
      }
      ++suppressed_refusals_[kind];
      return;
    }
    log(line);
    last_refusal_log_ = now;
  }

  // "... and 3 more refusals: 2 wrong token, 1 wrong run id"; the next interval starts now.
  void report_suppressed_refusals() {
    if (suppressed_refusals_.empty()) return;
    std::vector<std::pair<std::size_t, std::string>> counts;
    std::size_t total = 0;
    for (const auto& [kind, n] : suppressed_refusals_) {
      counts.emplace_back(n, kind);
      total += n;
    }
    std::stable_sort(counts.begin(), counts.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string parts;
    for (const auto& [n, kind] : counts)
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, kind);
    log(fmt::format("... and {} more {}: {}", total, total == 1 ? "refusal" : "refusals", parts));
    suppressed_refusals_.clear();
    last_refusal_log_ = Clock::now();
  }

  void listen(const tcp::endpoint& endpoint) {
    acceptor_.open(endpoint.protocol());
    int fd = acceptor_.native_handle();
    ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    accept_next();
    arm_keep_alive();
    arm_round_timer();
  }

  void accept_next() {
    acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
      if (self->closed_) return;
      if (ec) {
        // EMFILE and friends: back off briefly instead of spinning on a failing accept.
        self->accept_retry_timer_.expires_after(kAcceptRetry);
        self->accept_retry_timer_.async_wait([self](error_code e) {
          if (!e && !self->closed_) self->accept_next();
        });
        return;
      }
      self->on_accept(std::move(socket));
      self->accept_next();
    });
  }

  void on_accept(tcp::socket socket) {
    prepare_socket(socket);
    if (admitted_.size() >= options_.limits.max_admitted) {
      auto connection = std::make_shared<FramedConnection>(
          std::move(socket), kMaxHandshakeFrameSize, options_.connection.reject_linger);
      log_refusal("too many connections",
                  fmt::format("refusing {}: {} connections already admitted", connection->peer(),
                              admitted_.size()));
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
    peer.connection = std::make_shared<FramedConnection>(
        std::move(socket), kMaxHandshakeFrameSize, options_.connection.reject_linger);
    // 32 random bytes: a nonce fresh for every connection.
    peer.handshake.emplace(options_.credentials.run_id, options_.credentials.token,
                           random_nonce(), Welcome{options_.liveness});
    peer.deadline = std::make_shared<asio::steady_timer>(io_);
    peer.deadline->expires_after(options_.connection.handshake_timeout);
    std::weak_ptr<Impl> weak = shared_from_this();
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

  // Closes a connection the machine does not know (or has already forgotten). `tell`: say why
  // to the peer; without it the peer sees a plain close, which a client retries.
  void drop_peer(NodeId id, const std::string& kind, const std::string& reason, bool tell = true) {
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    log_refusal(
        kind, fmt::format("closing connection from {}: {}", it->second.connection->peer(), reason));
    if (tell) {
      it->second.connection->send(encode(ServerMessage{Reject{reason}}));
      it->second.connection->close_gracefully(options_.connection.reject_linger);
    } else {
      it->second.connection->close_now();  // nothing to deliver: no reason to wait
    }
    forget(id);
  }

  void forget(NodeId id) {
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    if (it->second.deadline) it->second.deadline->cancel();
    peers_.erase(it);
    pending_.erase(id);
    admitted_.erase(id);
  }

  void on_error(NodeId id, const std::string& why, bool violation) {
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    bool was_admitted = admitted_.count(id) > 0;
    if (violation) {
      drop_peer(id, "protocol error", why);
    } else {
      if (it->second.connection->over_budget())
        log_refusal("byte budget used up", fmt::format("closed connection from {}: {}",
                                                       it->second.connection->peer(), why));
      forget(id);
    }
    if (was_admitted) apply(machine_.disconnected(id, why, Clock::now()));
  }

  void on_frame(NodeId id, const std::string& body) {
    auto it = peers_.find(id);
    if (it == peers_.end()) return;
    Peer& peer = it->second;
    ClientMessage message;
    try {
      message = decode_client_message(body);
    } catch (const ProtocolError& e) {
      bool was_admitted = admitted_.count(id) > 0;
      drop_peer(id, "protocol error", fmt::format("protocol error: {}", e.what()));
      if (was_admitted) apply(machine_.disconnected(id, e.what(), Clock::now()));
      return;
    }
    if (peer.handshake) {
      ServerHandshake::Step step = peer.handshake->on_message(message);
      if (step.keys) peer.connection->authenticate(std::move(*step.keys));
      if (step.outcome == HandshakeOutcome::rejected) {
        log_refusal(step.kind,
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
        apply(machine_.connected(id, Clock::now()));
      }
      return;
    }
    if (auto* join = std::get_if<Join>(&message); join && join->node.addr.empty()) {
      join->node.addr = peer.address;
    }
    apply(machine_.received(id, message, Clock::now()));
  }

  void apply(const Effects& fx) {
    for (const std::string& line : fx.log) log(line);
    for (const auto& [kind, line] : fx.refusals) log_refusal(kind, line);
    for (const Outgoing& out : fx.messages) {
      auto it = peers_.find(out.to);
      if (it == peers_.end()) continue;
      it->second.connection->send(encode(out.message));
      if (out.close) {
        if (out.peer_lost) {
          it->second.connection->abandon();
        } else {
          // Peers declared lost get no linger: they would never answer.
          it->second.connection->close_gracefully(options_.connection.close_linger);
        }
        forget(out.to);
      }
    }
    arm_round_timer();
  }

  void arm_round_timer() {
    if (closed_) return;
    auto deadline = machine_.next_deadline();
    if (!deadline) {
      round_timer_.cancel();
      armed_for_.reset();
      return;
    }
    if (armed_for_ == deadline) return;
    armed_for_ = deadline;
    round_timer_.expires_at(*deadline);
    round_timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_) return;
      self->armed_for_.reset();
      self->apply(self->machine_.tick(Clock::now()));
    });
  }

  void arm_keep_alive() {
    keep_alive_timer_.expires_after(options_.liveness.keep_alive_interval);
    keep_alive_timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_) return;
      std::string beat = encode(ServerMessage{Heartbeat{}});
      for (NodeId id : self->admitted_) self->peers_.at(id).connection->send(beat);
      self->arm_keep_alive();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    round_timer_.cancel();
    keep_alive_timer_.cancel();
    accept_retry_timer_.cancel();
    // Nothing held back goes unsaid.
    refusal_timer_.cancel();
    report_suppressed_refusals();
    // The job's last messages went out (with their linger) when the machine decided them; what
    // is left is connections with nothing owed, some perhaps to stopped peers that would never
    // acknowledge a graceful close: close them at once.
    for (auto& [id, peer] : peers_) {
      if (peer.deadline) peer.deadline->cancel();
      peer.connection->abandon();
    }
    peers_.clear();
    pending_.clear();
    admitted_.clear();
  }

  void leave(const std::string& reason, const std::optional<tcp::endpoint>& own) {
    if (closed_) return;
    std::optional<NodeId> host;
    for (NodeId id : admitted_) {
      if (own && peers_.at(id).remote == *own) host = id;
    }
    // Its own connection is not told: the hosting agent knows why it stops. close() drops it.
    apply(machine_.host_left(host, "left: " + reason, Clock::now()));
    close();
  }

  asio::io_context& io_;
  ServerOptions options_;
  tcp::acceptor acceptor_;
  RoundMachine machine_;
  asio::steady_timer round_timer_;
  std::optional<Clock::time_point> armed_for_;
  asio::steady_timer keep_alive_timer_;
  asio::steady_timer accept_retry_timer_;
  std::map<NodeId, Peer> peers_;
  std::set<NodeId> pending_;  // ordered by id, i.e. by arrival: the oldest is evicted first
  std::set<NodeId> admitted_;
  // Partial incoming frames: of connections in their handshake, and of admitted ones.
  std::shared_ptr<ByteBudget> pending_bytes_;
  std::shared_ptr<ByteBudget> admitted_bytes_;
  NodeId next_id_ = 1;
  std::optional<Clock::time_point> last_refusal_log_;
  std::map<std::string, std::size_t> suppressed_refusals_;  // by kind, since last_refusal_log_
  asio::steady_timer refusal_timer_;
  bool closed_ = false;
};

RendezvousServer::RendezvousServer(asio::io_context& io, ServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

RendezvousServer::~RendezvousServer() { impl_->close(); }

void RendezvousServer::listen(const tcp::endpoint& endpoint) { impl_->listen(endpoint); }

tcp::endpoint RendezvousServer::local_endpoint() const { return impl_->acceptor_.local_endpoint(); }

void RendezvousServer::close() { impl_->close(); }

void RendezvousServer::leave(const std::string& reason, std::optional<tcp::endpoint> own) {
  impl_->leave(reason, own);
}

const RoundMachine& RendezvousServer::machine() const { return impl_->machine_; }

std::size_t RendezvousServer::pending_connections() const { return impl_->pending_.size(); }

std::size_t RendezvousServer::admitted_connections() const { return impl_->admitted_.size(); }

FrameBytes RendezvousServer::partial_frame_bytes() const {
  return {impl_->pending_bytes_->used(), impl_->pending_bytes_->peak(),
          impl_->admitted_bytes_->used(), impl_->admitted_bytes_->peak()};
}

}  // namespace trainrun::rendezvous
