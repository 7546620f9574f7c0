#include "trainrun/rendezvous/client.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "client_stops.hpp"
#include "conclusion.hpp"
#include "connector.hpp"
#include "framed_connection.hpp"
#include "handshake.hpp"
#include "keep_alive.hpp"
#include "stacks_requests.hpp"
#include "store_probe.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/rendezvous/crypto.hpp"
#include "trainrun/rendezvous/endpoint.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// A TCPStore answers in milliseconds; a busy trainrun host never answers the question at all.
constexpr Clock::duration kStoreProbeTimeout = std::chrono::seconds(2);

struct RendezvousClient::Impl : std::enable_shared_from_this<Impl> {
  enum class State { idle, connecting, handshaking, admitted, ended };

  Impl(asio::io_context& io, ClientOptions options, ClientEvents events)
      : io_(io),
        options_(std::move(options)),
        events_(std::move(events)),
        timer_(io),
        keep_alive_(std::make_shared<KeepAlive>(io)) {}

  void start() {
    if (state_ != State::idle) return;
    state_ = State::connecting;
    std::weak_ptr<Impl> weak = shared_from_this();
    connector_ = std::make_shared<Connector>(
        io_, options_,
        [weak](tcp::socket socket) {
          if (auto self = weak.lock()) self->on_connected(std::move(socket));
        },
        [weak](const Stop& stop) {
          if (auto self = weak.lock()) self->end(stop);
        });
    connector_->start();
  }

  // The endpoint answered, but not with the protocol: no retry can change that.
  void not_a_host(const std::string& what) {
    if (connection_) connection_->close_now();
    end(stops_.not_a_host(what));
  }

  // Asks the endpoint whether it is a torch TCPStore; `otherwise` runs when it is not. A store
  // found ends the client whatever it is doing, short of admission.
  void probe_store(StoreDialect dialect, Clock::duration timeout, std::function<void()> otherwise) {
    probing_ = true;
    std::weak_ptr<Impl> weak = shared_from_this();
    probe_torch_store(io_, peer_endpoint_, dialect, timeout,
                      [weak, otherwise](std::optional<std::string> store) {
                        auto self = weak.lock();
                        if (!self) return;
                        self->probing_ = false;
                        if (self->state_ != State::connecting && self->state_ != State::handshaking)
                          return;
                        if (store) return self->not_a_host(*store);
                        otherwise();
                      });
  }

  // The silent peer is named with what it said, once the torch 2.x probe is answered.
  void conclude_silence(const std::string& what) {
    if (probing_) {
      silence_verdict_ = what;
      return;
    }
    not_a_host(what);
  }

  // What the peer sent so far, in words.
  std::string what_was_sent() const {
    return ClientStops::sent(connection_->head(),
                             connection_->received() > connection_->head().size());
  }

  // No answer to the hello within the handshake timeout. A trainrun host answers a hello as soon
  // as it reads it, and closes what it cannot serve (a flood, its end), so a peer that holds
  // the connection and says nothing is not one: no retry. Told that our side is done, many
  // programs say who they are (an HTTP server answers 400), which names them better.
  // A torch 2.x TCPStore holds the hello this way; asked in its own protocol, it says so.
  void on_silence() {
    silent_ = true;
    connection_->finish_sending();
    std::weak_ptr<Impl> weak = shared_from_this();
    probe_store(StoreDialect::torch2, options_.connection.reject_linger, [weak] {
      auto self = weak.lock();
      if (self && self->silence_verdict_) self->not_a_host(*self->silence_verdict_);
    });
    timer_.expires_after(options_.connection.reject_linger);
    timer_.async_wait([weak](error_code e) {
      auto self = weak.lock();
      if (e || !self || self->state_ != State::handshaking) return;
      self->conclude_silence(self->silence());
    });
  }

  std::string silence() const {
    return fmt::format("it accepted the connection and sent nothing within {:.0f} s",
                       in_seconds(options_.connection.handshake_timeout));
  }

  // A connection lost before admission: the connector tries again within the same deadline.
  void retry(const std::string& why) {
    timer_.cancel();
    connection_.reset();
    state_ = State::connecting;
    connector_->retry(why);
  }

  void on_connected(tcp::socket socket) {
    prepare_socket(socket);
    error_code ec;
    local_endpoint_ = socket.local_endpoint(ec);
    peer_endpoint_ = socket.remote_endpoint(ec);
    state_ = State::handshaking;
    connection_ = std::make_shared<FramedConnection>(std::move(socket), kMaxFrameSize,
                                                     options_.connection.reject_linger);
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
    silent_ = false;
    silence_verdict_.reset();
    timer_.async_wait([weak](error_code e) {
      auto self = weak.lock();
      if (e || !self || self->state_ != State::handshaking) return;
      self->on_silence();
    });
  }

  // `violation`: the peer broke the framing rules (the connection is still open).
  void on_connection_lost(const std::string& why, bool violation) {
    // A sealed frame that does not open: someone between us and the server (which proved it
    // holds the token) altered or injected it. Nothing on this connection can be trusted.
    if (violation && connection_->authenticated()) {
      connection_->close_now();
      return end(stops_.tampered(why, state_ == State::admitted));
    }
    if (state_ == State::handshaking) {
      if (violation) return not_a_host(what_was_sent());
      // Every frame's length is below 2^24: a first byte that is not 0 begins none, however
      // short what came before the close.
      if (!connection_->head().empty() && connection_->head()[0] != '\0')
        return not_a_host(what_was_sent());
      if (silent_) {
        return conclude_silence(
            connection_->received() > 0
                ? fmt::format("{} after {:.0f} s, once this end had stopped sending",
                              what_was_sent(), in_seconds(options_.connection.handshake_timeout))
                : silence());
      }
      // Closed without an answer: a trainrun host does that to pending handshakes when flooded,
      // and when its job ends; the connector tries again within the same deadline. A torch 1.x
      // TCPStore does it to every hello: the first such close asks whether the peer is one.
      // The retry waits for the answer, so that a store is named without a retry line first.
      if (connection_->received() == 0 && !store_probed_) {
        store_probed_ = true;
        timer_.cancel();
        std::weak_ptr<Impl> weak = shared_from_this();
        return probe_store(StoreDialect::torch1, kStoreProbeTimeout, [weak, why] {
          if (auto self = weak.lock()) self->retry(why + " during the handshake");
        });
      }
      return retry(why + " during the handshake");
    }
    if (state_ == State::admitted) end(stops_.server_lost(why));
  }

  void on_frame(const std::string& body) {
    ServerMessage message;
    try {
      message = decode_server_message(body);
    } catch (const ProtocolError& e) {
      if (state_ == State::handshaking) {
        return not_a_host(
            fmt::format("{} (not a trainrun message: {})", what_was_sent(), e.what()));
      }
      return end(stops_.invalid_message(e.what()));
    }
    keep_alive_->heard();
    if (state_ == State::handshaking) {
      ClientHandshake::Step step = handshake_->on_message(message);
      if (step.outcome == HandshakeOutcome::rejected) {
        if (const auto* reject = std::get_if<Reject>(&message))
          return end(stops_.refused(step.reason, reject->kind));
        // We refuse the server (its token proof): it is told why, so that its log says it too.
        connection_->send(encode(ClientMessage{Leave{step.reason}}));
        return end(stops_.refused_server(step.reason));
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
          } else if constexpr (std::is_same_v<T, StacksAsk>) {
            on_stacks_ask(m.id, m.question);
          } else if constexpr (std::is_same_v<T, StacksAnswer>) {
            stacks_.answer(m);
          } else if constexpr (std::is_same_v<T, StacksEnd>) {
            stacks_.finish(m.id, m.missing, m.error);
          } else if constexpr (std::is_same_v<T, Stop>) {
            end(m);
          } else if constexpr (std::is_same_v<T, Reject>) {
            end(stops_.dropped(m));
          }
        },
        message);
  }

  void on_admitted(const Welcome& welcome) {
    timer_.cancel();
    state_ = State::admitted;
    std::weak_ptr<Impl> weak = shared_from_this();
    keep_alive_->start(
        welcome.liveness,
        [weak] {
          if (auto self = weak.lock()) self->connection_->send(encode(ClientMessage{Heartbeat{}}));
        },
        [weak] {
          if (auto self = weak.lock()) self->on_silent();
        });
    if (pending_join_) send_join();
  }

  void on_silent() {
    // Nothing more will get through: no lingering to deliver a goodbye, which would keep the
    // agent waiting past the heartbeat timeout.
    connection_->close_now();
    end(stops_.silent(keep_alive_->liveness().heartbeat_timeout));
  }

  void join(const NodeDescriptor& node) {
    if (state_ == State::ended) return;
    pending_join_ = node;
    if (state_ == State::admitted) send_join();
  }

  void send_join() {
    NodeDescriptor node =
        advertised(*pending_join_, local_endpoint_.address(), options_.endpoint.host);
    pending_join_.reset();
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

  void abort(const std::string& reason) {
    if (state_ != State::admitted || !assignment_) return;
    connection_->send(encode(ClientMessage{Abort{assignment_->round, reason}}));
  }

  void on_stacks_ask(std::uint64_t id, std::string question) {
    std::weak_ptr<Impl> weak = shared_from_this();
    auto reply = [weak, id](std::string answer) {
      auto self = weak.lock();
      if (self && self->state_ == State::admitted)
        self->connection_->send(encode(ClientMessage{StacksAnswer{id, std::move(answer)}}));
    };
    if (!events_.on_stacks_ask)
      return reply(R"({"error": "this agent cannot collect its workers' stacks"})");
    events_.on_stacks_ask(std::move(question), std::move(reply));
  }

  void request_stacks(StacksDone done, std::string question, Clock::duration bound) {
    if (state_ != State::admitted)
      return done({}, {}, "this node is not connected to the rendezvous host now");
    const std::uint64_t id = stacks_.open(std::move(done), bound);
    connection_->send(encode(ClientMessage{StacksRequest{id, std::move(question)}}));
  }

  void leave(const std::string& reason) {
    if (state_ == State::admitted) connection_->send(encode(ClientMessage{Leave{reason}}));
    shut();
  }

  void shut() {
    state_ = State::ended;
    stacks_.abandon();
    timer_.cancel();
    keep_alive_->cancel();
    if (connector_) connector_->cancel();
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
  ClientStops stops_{to_string(options_.endpoint)};
  State state_ = State::idle;
  asio::steady_timer timer_;   // the handshake's deadline
  bool silent_ = false;        // the handshake timed out: this end has stopped sending
  bool probing_ = false;       // a question in a TCPStore's protocol is under way
  bool store_probed_ = false;  // the first connection closed at the hello has been asked about
  std::optional<std::string> silence_verdict_;  // what a silent peer is, if it is not a store
  std::shared_ptr<Connector> connector_;
  std::shared_ptr<KeepAlive> keep_alive_;
  std::shared_ptr<FramedConnection> connection_;
  std::optional<ClientHandshake> handshake_;
  tcp::endpoint local_endpoint_;
  tcp::endpoint peer_endpoint_;
  std::string advertised_address_;
  std::optional<NodeDescriptor> pending_join_;
  std::optional<Assignment> assignment_;
  StacksRequests stacks_{io_};
};

NodeDescriptor advertised(NodeDescriptor node, const asio::ip::address& local,
                          const std::string& endpoint_host) {
  if (node.addr.empty()) {
    if (!local.is_loopback() || is_loopback_host(endpoint_host)) {
      node.addr = local.to_string();
    } else {
      node.addr = trainrun::host_name();
    }
  }
  if (node.host.empty()) node.host = trainrun::host_name();
  return node;
}

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
void RendezvousClient::abort(const std::string& reason) { impl_->abort(reason); }
void RendezvousClient::leave(const std::string& reason) { impl_->leave(reason); }
void RendezvousClient::request_stacks(StacksDone done, std::string question,
                                      Clock::duration bound) {
  impl_->request_stacks(std::move(done), std::move(question), bound);
}
std::optional<Assignment> RendezvousClient::assignment() const { return impl_->assignment_; }
std::string RendezvousClient::advertised_address() const { return impl_->advertised_address_; }

std::optional<tcp::endpoint> RendezvousClient::local_endpoint() const {
  if (impl_->state_ != Impl::State::admitted) return std::nullopt;
  return impl_->local_endpoint_;
}

}  // namespace trainrun::rendezvous
