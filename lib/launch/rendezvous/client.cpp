#include "rendezvous/client.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <random>

#include "rendezvous/framed_connection.hpp"
#include "rendezvous/handshake.hpp"
#include "rendezvous/sha256.hpp"

namespace trainrun::launch::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string host_name() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
  return buffer;
}

bool is_literal_loopback(const std::string& host) {
  if (host == "localhost") return true;
  error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

}  // namespace

struct RendezvousClient::Impl : std::enable_shared_from_this<Impl> {
  enum class State { idle, connecting, handshaking, admitted, ended };

  Impl(asio::io_context& io, ClientOptions options, ClientEvents events)
      : io_(io),
        options_(std::move(options)),
        events_(std::move(events)),
        resolver_(io),
        timer_(io),
        keep_alive_timer_(io),
        backoff_(options_.initial_backoff) {}

  std::string endpoint() const { return fmt::format("{}:{}", options_.host, options_.port); }

  void log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  void start() {
    if (state_ != State::idle) return;
    started_at_ = Clock::now();
    attempt();
  }

  void attempt() {
    state_ = State::connecting;
    std::weak_ptr<Impl> weak = shared_from_this();
    timer_.expires_after(options_.attempt_timeout);
    timer_.async_wait([weak](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->state_ != State::connecting) return;
      self->resolver_.cancel();
      if (self->socket_) self->socket_->close();
    });
    resolver_.async_resolve(
        options_.host, std::to_string(options_.port),
        [weak](error_code ec, tcp::resolver::results_type results) {
          auto self = weak.lock();
          if (!self || self->state_ != State::connecting) return;
          if (ec)
            return self->retry(
                fmt::format("cannot resolve {}: {}", self->options_.host, ec.message()));
          self->socket_ = std::make_unique<tcp::socket>(self->io_);
          asio::async_connect(*self->socket_, results,
                              [weak](error_code ec2, const tcp::endpoint&) {
                                auto self2 = weak.lock();
                                if (!self2 || self2->state_ != State::connecting) return;
                                if (ec2) return self2->retry(ec2.message());
                                self2->on_connected();
                              });
        });
  }

  void retry(const std::string& why) {
    timer_.cancel();
    socket_.reset();
    connection_.reset();
    auto now = Clock::now();
    if (now - started_at_ >= options_.connect_deadline) {
      return end(Stop{StopCause::join_timeout,
                      fmt::format("rendezvous endpoint {} not reachable after {:.0f} s ({}); is "
                                  "the node that hosts it running, and is --rdzv-endpoint right?",
                                  endpoint(), seconds(options_.connect_deadline), why),
                      1, std::nullopt});
    }
    if (!last_retry_log_ || now - *last_retry_log_ >= options_.retry_log_interval) {
      log(fmt::format("rendezvous endpoint {} not reachable yet ({}), retrying", endpoint(), why));
      last_retry_log_ = now;
    }
    // Jitter spreads many agents' retries so a restarted host is not hit all at once.
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    auto wait = std::chrono::duration_cast<Clock::duration>(backoff_ * jitter(random_));
    backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    state_ = State::connecting;
    timer_.expires_after(wait);
    timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->state_ != State::connecting) return;
      self->attempt();
    });
  }

  void on_connected() {
    timer_.cancel();
    prepare_socket(*socket_);
    error_code ec;
    local_address_ = socket_->local_endpoint(ec).address();
    state_ = State::handshaking;
    connection_ = std::make_shared<FramedConnection>(std::move(*socket_), kMaxFrameSize);
    socket_.reset();
    handshake_.emplace(options_.run_id, options_.token, random_hex(32));
    std::weak_ptr<Impl> weak = shared_from_this();
    connection_->start(
        [weak](std::string body) {
          if (auto self = weak.lock()) self->on_frame(body);
        },
        [weak](const std::string& why, bool) {
          if (auto self = weak.lock()) self->on_connection_lost(why);
        });
    connection_->send(encode(ClientMessage{handshake_->hello()}));
    timer_.expires_after(options_.handshake_timeout);
    timer_.async_wait([weak](error_code e) {
      auto self = weak.lock();
      if (e || !self || self->state_ != State::handshaking) return;
      self->connection_->close_now();
      self->retry("no answer to the handshake");
    });
  }

  void on_connection_lost(const std::string& why) {
    if (state_ == State::handshaking) return retry(why);
    if (state_ == State::admitted) {
      end(Stop{StopCause::server_lost,
               fmt::format("lost the rendezvous server at {}: {}", endpoint(), why), 1,
               std::nullopt});
    }
  }

  void on_frame(const std::string& body) {
    ServerMessage message;
    try {
      message = decode_server_message(body);
    } catch (const ProtocolError& e) {
      return end(Stop{StopCause::server_lost,
                      fmt::format("the rendezvous server at {} sent an invalid message: {}",
                                  endpoint(), e.what()),
                      1, std::nullopt});
    }
    last_heard_ = Clock::now();
    if (state_ == State::handshaking) {
      ClientHandshake::Step step = handshake_->on_message(message);
      if (step.outcome == HandshakeOutcome::rejected) {
        return end(
            Stop{StopCause::rejected,
                 fmt::format("the rendezvous at {} refused this node: {}", endpoint(), step.reason),
                 1, std::nullopt});
      }
      if (step.reply) connection_->send(encode(*step.reply));
      if (step.outcome == HandshakeOutcome::accepted) on_admitted(step.welcome);
      return;
    }
    if (state_ != State::admitted) return;
    std::visit(
        [this](const auto& m) {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, Assignment>) {
            assignment_ = m;
            if (events_.on_assignment) events_.on_assignment(m);
          } else if constexpr (std::is_same_v<T, Restart>) {
            if (events_.on_restart) events_.on_restart(m);
          } else if constexpr (std::is_same_v<T, Waiting>) {
            if (events_.on_waiting) events_.on_waiting(m);
          } else if constexpr (std::is_same_v<T, Stop>) {
            end(m);
          } else if constexpr (std::is_same_v<T, Reject>) {
            end(Stop{
                StopCause::rejected,
                fmt::format("the rendezvous at {} dropped this node: {}", endpoint(), m.reason), 1,
                std::nullopt});
          }
        },
        message);
  }

  void on_admitted(const Welcome& welcome) {
    timer_.cancel();
    state_ = State::admitted;
    keep_alive_ = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(0.01, welcome.keep_alive_interval_s)));
    heartbeat_timeout_ = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(0.02, welcome.heartbeat_timeout_s)));
    arm_keep_alive();
    if (pending_join_) send_join();
  }

  void arm_keep_alive() {
    keep_alive_timer_.expires_after(keep_alive_);
    keep_alive_timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->state_ != State::admitted) return;
      if (Clock::now() - self->last_heard_ >= self->heartbeat_timeout_) {
        // Nothing more will get through: no lingering to deliver a goodbye, which would keep
        // the agent waiting past the heartbeat timeout.
        self->connection_->close_now();
        return self->end(Stop{StopCause::server_lost,
                              fmt::format("lost the rendezvous server at {}: no message for {:.0f} "
                                          "s (heartbeat timeout)",
                                          self->endpoint(), seconds(self->heartbeat_timeout_)),
                              1, std::nullopt});
      }
      self->connection_->send(encode(ClientMessage{Heartbeat{}}));
      self->arm_keep_alive();
    });
  }

  void join(const NodeDescriptor& node) {
    if (state_ == State::ended) return;
    pending_join_ = node;
    if (state_ == State::admitted) send_join();
  }

  void send_join() {
    NodeDescriptor node = *pending_join_;
    pending_join_.reset();
    if (node.addr.empty()) {
      if (!local_address_.is_loopback() || is_literal_loopback(options_.host)) {
        node.addr = local_address_.to_string();
      } else {
        node.addr = host_name();
      }
    }
    if (node.host.empty()) node.host = host_name();
    connection_->send(encode(ClientMessage{Join{node}}));
  }

  void report_failure(const WorkerFailure& failure) {
    if (state_ != State::admitted || !assignment_) return;
    connection_->send(encode(ClientMessage{FailureReport{assignment_->round, failure}}));
  }

  void report_done() {
    if (state_ != State::admitted || !assignment_) return;
    connection_->send(encode(ClientMessage{Done{assignment_->round}}));
  }

  void leave(const std::string& reason) {
    if (state_ == State::admitted) connection_->send(encode(ClientMessage{Leave{reason}}));
    shut();
  }

  void shut() {
    state_ = State::ended;
    timer_.cancel();
    keep_alive_timer_.cancel();
    resolver_.cancel();
    if (socket_) {
      error_code ignored;
      socket_->close(ignored);
    }
    if (connection_) connection_->close_gracefully(std::chrono::seconds(2));
  }

  void end(const Stop& stop) {
    if (state_ == State::ended) return;
    shut();
    if (events_.on_stop) events_.on_stop(stop);
  }

  asio::io_context& io_;
  ClientOptions options_;
  ClientEvents events_;
  State state_ = State::idle;
  tcp::resolver resolver_;
  asio::steady_timer timer_;
  asio::steady_timer keep_alive_timer_;
  std::unique_ptr<tcp::socket> socket_;
  std::shared_ptr<FramedConnection> connection_;
  std::optional<ClientHandshake> handshake_;
  asio::ip::address local_address_;
  Clock::time_point started_at_;
  Clock::time_point last_heard_;
  std::optional<Clock::time_point> last_retry_log_;
  Clock::duration backoff_;
  Clock::duration keep_alive_ = std::chrono::seconds(5);
  Clock::duration heartbeat_timeout_ = std::chrono::seconds(15);
  std::optional<NodeDescriptor> pending_join_;
  std::optional<Assignment> assignment_;
  std::minstd_rand random_{std::random_device{}()};
};

RendezvousClient::RendezvousClient(asio::io_context& io, ClientOptions options, ClientEvents events)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(events))) {}

RendezvousClient::~RendezvousClient() { impl_->shut(); }

void RendezvousClient::start() { impl_->start(); }
void RendezvousClient::join(const NodeDescriptor& node) { impl_->join(node); }
void RendezvousClient::report_failure(const WorkerFailure& failure) {
  impl_->report_failure(failure);
}
void RendezvousClient::report_done() { impl_->report_done(); }
void RendezvousClient::leave(const std::string& reason) { impl_->leave(reason); }
std::optional<Assignment> RendezvousClient::assignment() const { return impl_->assignment_; }

}  // namespace trainrun::launch::rdzv
