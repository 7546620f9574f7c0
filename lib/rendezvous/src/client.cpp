#include "trainrun/rendezvous/client.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "trainrun/base/system.hpp"
#include "trainrun/rendezvous/backoff.hpp"
#include "trainrun/rendezvous/conclusion.hpp"
#include "trainrun/rendezvous/crypto.hpp"
#include "trainrun/rendezvous/endpoint.hpp"
#include "trainrun/rendezvous/framed_connection.hpp"
#include "trainrun/rendezvous/handshake.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

struct RendezvousClient::Impl : std::enable_shared_from_this<Impl> {
  enum class State { idle, connecting, handshaking, admitted, ended };

  Impl(asio::io_context& io, ClientOptions options, ClientEvents events)
      : io_(io),
        options_(std::move(options)),
        events_(std::move(events)),
        resolver_(io),
        timer_(io),
        keep_alive_timer_(io),
        backoff_(options_.retry.backoff, options_.deadline) {}

  std::string endpoint() const {
    return fmt::format("{}:{}", options_.endpoint.host, options_.endpoint.port);
  }

  void log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  void start() {
    if (state_ != State::idle) return;
    started_at_ = Clock::now();
    backoff_.start(started_at_);
    attempt();
  }

  void attempt() {
    state_ = State::connecting;
    attempt_timed_out_ = false;
    std::weak_ptr<Impl> weak = shared_from_this();
    timer_.expires_after(options_.connection.attempt_timeout);
    timer_.async_wait([weak](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->state_ != State::connecting) return;
      self->attempt_timed_out_ = true;
      self->resolver_.cancel();
      if (self->socket_) self->socket_->close();
    });
    resolver_.async_resolve(
        options_.endpoint.host, std::to_string(options_.endpoint.port),
        [weak](error_code ec, tcp::resolver::results_type results) {
          auto self = weak.lock();
          if (!self || self->state_ != State::connecting) return;
          if (ec) {
            return self->retry(
                self->attempt_timed_out_
                    ? fmt::format("resolving {} took longer than {:.0f} s",
                                  self->options_.endpoint.host,
                                  in_seconds(self->options_.connection.attempt_timeout))
                    : fmt::format("cannot resolve {}: {}", self->options_.endpoint.host,
                                  ec.message()));
          }
          self->socket_ = std::make_unique<tcp::socket>(self->io_);
          asio::async_connect(*self->socket_, results,
                              [weak](error_code ec2, const tcp::endpoint&) {
                                auto self2 = weak.lock();
                                if (!self2 || self2->state_ != State::connecting) return;
                                if (ec2) return self2->on_connect_failed(ec2);
                                self2->on_connected();
                              });
        });
  }

  void on_connect_failed(const error_code& ec) {
    if (attempt_timed_out_) {
      return retry(fmt::format("no answer to connecting within {:.0f} s",
                               in_seconds(options_.connection.attempt_timeout)));
    }
    // Refused while this machine cannot bind the port: whatever holds it does not listen, so no
    // trainrun agent hosts the endpoint. The grace covers a hosting agent caught between its
    // bind and its listen.
    if (ec == asio::error::connection_refused && options_.local_port_held) {
      Clock::time_point judge_at =
          started_at_ + std::min(options_.connection.refused_grace, options_.deadline);
      if (Clock::now() < judge_at) return retry(ec.message(), judge_at);
      if (std::optional<std::string> bind_error = options_.local_port_held()) {
        return end(Stop{StopCause::rejected,
                        fmt::format("rendezvous endpoint {}: the port is in use by another process "
                                    "that is not a trainrun rendezvous host (bind: {}; connect: "
                                    "{})",
                                    endpoint(), *bind_error, ec.message()),
                        Refusal::port_held});
      }
    }
    retry(ec.message());
  }

  // The endpoint answered, but not with the protocol: no retry can change that.
  void not_a_host(const std::string& what) {
    connection_->close_now();
    end(Stop{StopCause::rejected,
             fmt::format("rendezvous endpoint {}: the process listening there is not a trainrun "
                         "rendezvous host ({})",
                         endpoint(), what),
             Refusal::not_a_host});
  }

  // `by`: try again no later than this.
  void retry(const std::string& why, std::optional<Clock::time_point> by = std::nullopt) {
    timer_.cancel();
    socket_.reset();
    connection_.reset();
    auto now = Clock::now();
    std::optional<Clock::duration> wait = backoff_.failed(why, now);
    if (!wait) {
      // Every distinct failure, not only the last: a refusal followed by failed handshakes
      // says the host started and something else went wrong.
      std::string reason =
          connections_ == 0
              ? fmt::format("rendezvous endpoint {} not reachable after {:.0f} s ({})", endpoint(),
                            in_seconds(options_.deadline), backoff_.summary())
              : fmt::format(
                    "rendezvous endpoint {}: no handshake completed in {:.0f} s ({} "
                    "connection{}; {})",
                    endpoint(), in_seconds(options_.deadline), connections_,
                    connections_ == 1 ? "" : "s", backoff_.summary());
      return end(Stop{StopCause::join_timeout, reason,
                      connections_ == 0 ? Refusal::unreachable : Refusal::no_handshake});
    }
    if (!last_retry_log_ || now - *last_retry_log_ >= options_.retry.log_interval) {
      log(fmt::format("rendezvous endpoint {} not reachable yet ({}), retrying", endpoint(), why));
      last_retry_log_ = now;
    }
    if (by) wait = std::max(Clock::duration::zero(), std::min(*wait, *by - now));
    state_ = State::connecting;
    timer_.expires_after(*wait);
    timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->state_ != State::connecting) return;
      self->attempt();
    });
  }

  void on_connected() {
    timer_.cancel();
    ++connections_;
    prepare_socket(*socket_);
    error_code ec;
    local_endpoint_ = socket_->local_endpoint(ec);
    state_ = State::handshaking;
    connection_ = std::make_shared<FramedConnection>(std::move(*socket_), kMaxFrameSize,
                                                     options_.connection.reject_linger);
    socket_.reset();
    handshake_.emplace(options_.credentials.run_id, options_.credentials.token, random_nonce());
    std::weak_ptr<Impl> weak = shared_from_this();
    connection_->start(
        [weak](std::string body) {
          if (auto self = weak.lock()) self->on_frame(body);
        },
        [weak](const std::string& why, bool violation) {
          if (auto self = weak.lock()) self->on_connection_lost(why, violation);
        });
    connection_->send(encode(ClientMessage{handshake_->hello()}));
    timer_.expires_after(options_.connection.handshake_timeout);
    timer_.async_wait([weak](error_code e) {
      auto self = weak.lock();
      if (e || !self || self->state_ != State::handshaking) return;
      self->connection_->close_now();
      self->retry(fmt::format("no answer to the handshake within {:.0f} s",
                              in_seconds(self->options_.connection.handshake_timeout)));
    });
  }

  // `violation`: the peer broke the framing rules (the connection is still open).
  void on_connection_lost(const std::string& why, bool violation) {
    // A sealed frame that does not open: someone between us and the server (which proved it
    // holds the token) altered or injected it. Nothing on this connection can be trusted.
    if (violation && connection_->authenticated()) {
      connection_->close_now();
      return end(Stop{state_ == State::admitted ? StopCause::server_lost : StopCause::rejected,
                      fmt::format("the connection to the rendezvous server at {} was tampered "
                                  "with: {}",
                                  endpoint(), why),
                      1, std::nullopt});
    }
    if (state_ == State::handshaking) {
      if (violation) return not_a_host("it sent data that is not a trainrun frame: " + why);
      return retry(why + " during the handshake");
    }
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
      if (state_ == State::handshaking) {
        return not_a_host(
            fmt::format("it sent a message that is not the trainrun protocol: {}", e.what()));
      }
      return end(Stop{StopCause::server_lost,
                      fmt::format("the rendezvous server at {} sent an invalid message: {}",
                                  endpoint(), e.what()),
                      1, std::nullopt});
    }
    last_heard_ = Clock::now();
    if (state_ == State::handshaking) {
      ClientHandshake::Step step = handshake_->on_message(message);
      if (step.outcome == HandshakeOutcome::rejected) {
        if (const auto* reject = std::get_if<Reject>(&message)) {
          return end(Stop{
              StopCause::rejected,
              fmt::format("the rendezvous at {} refused this node: {}", endpoint(), step.reason),
              reject->kind});
        }
        // We refuse the server (its token proof): it is told why, so that its log says it too.
        connection_->send(encode(ClientMessage{Leave{step.reason}}));
        return end(
            Stop{StopCause::rejected,
                 fmt::format("this node refused the rendezvous at {}: {}", endpoint(), step.reason),
                 1, std::nullopt});
      }
      if (step.reply) connection_->send(encode(*step.reply));
      if (step.keys) connection_->authenticate(std::move(*step.keys));
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
          } else if constexpr (std::is_same_v<T, Halt>) {
            if (events_.on_halt) events_.on_halt(m);
          } else if constexpr (std::is_same_v<T, Stop>) {
            end(m);
          } else if constexpr (std::is_same_v<T, Reject>) {
            end(Stop{
                StopCause::rejected,
                fmt::format("the rendezvous at {} dropped this node: {}", endpoint(), m.reason),
                m.kind});
          }
        },
        message);
  }

  void on_admitted(const Welcome& welcome) {
    timer_.cancel();
    state_ = State::admitted;
    // Floors, so that a server's zeros cannot make the keep-alive spin.
    liveness_.keep_alive_interval = std::max<Clock::duration>(std::chrono::milliseconds(10),
                                                              welcome.liveness.keep_alive_interval);
    liveness_.heartbeat_timeout = std::max<Clock::duration>(std::chrono::milliseconds(20),
                                                            welcome.liveness.heartbeat_timeout);
    arm_keep_alive();
    if (pending_join_) send_join();
  }

  void arm_keep_alive() {
    keep_alive_timer_.expires_after(liveness_.keep_alive_interval);
    keep_alive_timer_.async_wait([weak = std::weak_ptr<Impl>(shared_from_this())](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->state_ != State::admitted) return;
      if (Clock::now() - self->last_heard_ >= self->liveness_.heartbeat_timeout) {
        // Nothing more will get through: no lingering to deliver a goodbye, which would keep
        // the agent waiting past the heartbeat timeout.
        self->connection_->close_now();
        return self->end(
            Stop{StopCause::server_lost,
                 fmt::format("lost the rendezvous server at {}: no message for {:.0f} "
                             "s (heartbeat timeout)",
                             self->endpoint(), in_seconds(self->liveness_.heartbeat_timeout)),
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
      const asio::ip::address local = local_endpoint_.address();
      if (!local.is_loopback() || is_loopback_host(options_.endpoint.host)) {
        node.addr = local.to_string();
      } else {
        node.addr = trainrun::host_name();
      }
    }
    if (node.host.empty()) node.host = trainrun::host_name();
    advertised_address_ = node.addr;
    connection_->send(encode(ClientMessage{Join{node}}));
  }

  void report_failure(const FailureReport& failure, const std::vector<WorkerFailure>& failures,
                      int not_relayed) {
    if (state_ != State::admitted || !assignment_) return;
    Ended list = relayed_failures(assignment_->round, failures, not_relayed);
    connection_->send(encode(ClientMessage{
        Failure{assignment_->round, failure, std::move(list.failures), list.not_relayed}}));
  }

  void report_ended(const std::vector<WorkerFailure>& failures, int not_relayed) {
    if (state_ != State::admitted || !assignment_) return;
    connection_->send(
        encode(ClientMessage{relayed_failures(assignment_->round, failures, not_relayed)}));
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
    if (connection_) connection_->close_gracefully(options_.connection.leave_linger);
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
  tcp::endpoint local_endpoint_;
  std::string advertised_address_;
  Clock::time_point started_at_;
  Clock::time_point last_heard_;
  std::optional<Clock::time_point> last_retry_log_;
  bool attempt_timed_out_ = false;
  int connections_ = 0;  // TCP connections made while not yet admitted
  Backoff backoff_;
  LivenessOptions liveness_;  // the server's, from `welcome`
  std::optional<NodeDescriptor> pending_join_;
  std::optional<Assignment> assignment_;
};

RendezvousClient::RendezvousClient(asio::io_context& io, ClientOptions options, ClientEvents events)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(events))) {}

RendezvousClient::~RendezvousClient() { impl_->shut(); }

void RendezvousClient::start() { impl_->start(); }
void RendezvousClient::join(const NodeDescriptor& node) { impl_->join(node); }
void RendezvousClient::report_failure(const FailureReport& failure,
                                      const std::vector<WorkerFailure>& failures, int not_relayed) {
  impl_->report_failure(failure, failures, not_relayed);
}
void RendezvousClient::report_ended(const std::vector<WorkerFailure>& failures, int not_relayed) {
  impl_->report_ended(failures, not_relayed);
}
void RendezvousClient::report_done() { impl_->report_done(); }
void RendezvousClient::leave(const std::string& reason) { impl_->leave(reason); }
std::optional<Assignment> RendezvousClient::assignment() const { return impl_->assignment_; }
std::string RendezvousClient::advertised_address() const { return impl_->advertised_address_; }

std::optional<tcp::endpoint> RendezvousClient::local_endpoint() const {
  if (impl_->state_ != Impl::State::admitted) return std::nullopt;
  return impl_->local_endpoint_;
}

}  // namespace trainrun::rendezvous
