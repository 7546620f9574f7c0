#include "trainrun/rendezvous/server.hpp"

#include <fmt/format.h>

#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <map>

#include "round_machine.hpp"
#include "server_connections.hpp"
#include "trainrun/rendezvous/refusal_throttle.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// The round dispatch: what admitted connections say goes to the RoundMachine, and its effects
// (messages, closes, log lines) go back out through the connections; the machine's deadlines,
// the server's heartbeats and the throttled refusal log run here.
struct RendezvousServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, ServerOptions options)
      : io_(io),
        options_(std::move(options)),
        machine_(options_.round, options_.liveness, options_.endpoint, Clock::now()),
        round_timer_(io),
        keep_alive_timer_(io),
        refusals_(options_.limits.refusal_log_interval),
        refusal_timer_(io) {}

  // Not in the constructor: the connections' events hold this weakly (shared_from_this).
  void connect(asio::io_context& io) {
    std::weak_ptr<Impl> weak = shared_from_this();
    ServerConnections::Events events;
    events.admitted = [weak](NodeId id) {
      if (auto self = weak.lock()) self->apply(self->machine_.connected(id, Clock::now()));
    };
    events.received = [weak](NodeId id, const ClientMessage& message) {
      auto self = weak.lock();
      if (!self) return;
      // The roll call is not the rounds' business; to the machine it is a sign of life.
      if (self->roll_call(id, message))
        return self->apply(self->machine_.received(id, Heartbeat{}, Clock::now()));
      self->apply(self->machine_.received(id, message, Clock::now()));
    };
    events.lost = [weak](NodeId id, const std::string& why) {
      auto self = weak.lock();
      if (!self) return;
      self->stacks_lost(id, why);
      self->apply(self->machine_.disconnected(id, why, Clock::now()));
    };
    events.refused = [weak](const std::string& kind, const std::string& line) {
      if (auto self = weak.lock()) self->refuse(kind, line);
    };
    connections_ = std::make_shared<ServerConnections>(io, options_, std::move(events));
  }

  void log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  // Connection-level refusals, throttled (RefusalThrottle): what is held back is said when the
  // interval ends, or at close.
  void refuse(const std::string& kind, const std::string& line) {
    const bool was_holding = refusals_.holding();
    if (refusals_.admit(kind, Clock::now())) return log(line);
    if (was_holding || closed_) return;
    refusal_timer_.expires_at(*refusals_.due());
    refusal_timer_.async_wait([weak = weak_from_this()](error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->release_refusals();
    });
  }

  void release_refusals() {
    if (auto line = refusals_.release(Clock::now())) log(*line);
  }

  void listen(const tcp::endpoint& endpoint) {
    connections_->listen(endpoint);
    arm_keep_alive();
    arm_round_timer();
  }

  void apply(const Effects& fx) {
    for (const std::string& line : fx.log) log(line);
    for (const auto& [kind, line] : fx.refusals) refuse(kind, line);
    for (const Outgoing& out : fx.messages) {
      connections_->send(out.to, encode(out.message));
      if (out.close) connections_->close(out.to, out.peer_lost);
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
      self->connections_->send_to_admitted(encode(ServerMessage{Heartbeat{}}));
      self->arm_keep_alive();
    });
  }

  // The roll call across nodes (trainrun --stacks): a request is fanned out to every other
  // admitted agent, their answers relayed to the asker as they come, and a stacks_end names those
  // that did not answer within kStacksAnswerTimeout or were lost. Whether handled here.
  bool roll_call(NodeId id, const ClientMessage& message) {
    if (const auto* request = std::get_if<StacksRequest>(&message)) {
      ask_stacks(id, request->id, request->question);
      return true;
    }
    if (const auto* answer = std::get_if<StacksAnswer>(&message)) {
      stacks_answered(id, *answer);
      return true;
    }
    return false;
  }

  void ask_stacks(NodeId asker, std::uint64_t asker_id, const std::string& question) {
    // Each open call may hold an answer of every node in the asker's queue: a few at most.
    if (stacks_calls_.size() >= kMaxStacksCalls) {
      connections_->send(
          asker, encode(ServerMessage{StacksEnd{asker_id,
                                                {},
                                                "the rendezvous host is answering other requests "
                                                "for stacks: try again in a few seconds"}}));
      return;
    }
    const std::uint64_t id = next_stacks_id_++;
    StacksCall& call = stacks_calls_[id];
    call.asker = asker;
    call.asker_id = asker_id;
    for (NodeId node : connections_->admitted_ids())
      if (node != asker) call.waiting.emplace(node, machine_.describe(node));
    const std::string ask = encode(ServerMessage{StacksAsk{id, question}});
    for (const auto& [node, name] : call.waiting) connections_->send(node, ask);
    call.timer = std::make_shared<asio::steady_timer>(io_, kStacksAnswerTimeout);
    call.timer->async_wait([weak = weak_from_this(), id](error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->stacks_timed_out(id);
    });
    finish_stacks(id);
  }

  void stacks_answered(NodeId from, const StacksAnswer& answer) {
    auto it = stacks_calls_.find(answer.id);
    // Late (after the timeout), or not asked: nobody waits for it.
    if (it == stacks_calls_.end() || it->second.waiting.erase(from) == 0) return;
    it->second.held.push_back(
        encode(ServerMessage{StacksAnswer{it->second.asker_id, answer.answer}}));
    relay_stacks(answer.id);
  }

  // The answers go to the asker at the pace it reads them: a thousand nodes answer tens of
  // megabytes at once, more than one connection may queue (FramedConnection::kMaxQueuedBytes).
  void relay_stacks(std::uint64_t id) {
    auto it = stacks_calls_.find(id);
    if (it == stacks_calls_.end()) return;
    StacksCall& call = it->second;
    while (!call.held.empty() && connections_->queued_bytes(call.asker) < kRelayWindow) {
      connections_->send(call.asker, call.held.front());
      call.held.pop_front();
    }
    if (call.held.empty()) return finish_stacks(id);
    // One wait per asker, for all its calls.
    connections_->when_drained(call.asker, kRelayWindow / 2, [weak = weak_from_this()] {
      auto self = weak.lock();
      if (!self) return;
      std::vector<std::uint64_t> ids;
      for (const auto& [each, c] : self->stacks_calls_) ids.push_back(each);
      for (std::uint64_t each : ids) self->relay_stacks(each);
    });
  }

  void stacks_timed_out(std::uint64_t id) {
    auto it = stacks_calls_.find(id);
    if (it == stacks_calls_.end()) return;
    for (const auto& [node, name] : it->second.waiting)
      it->second.missing.push_back(
          {name, fmt::format("no answer within {} s", kStacksAnswerTimeout.count())});
    it->second.waiting.clear();
    finish_stacks(id);
  }

  void stacks_lost(NodeId node, const std::string& why) {
    std::vector<std::uint64_t> ids;
    for (auto& [id, call] : stacks_calls_) {
      if (call.asker == node) {
        call.timer->cancel();
        continue;
      }
      auto w = call.waiting.find(node);
      if (w == call.waiting.end()) continue;
      call.missing.push_back({w->second, "its connection ended: " + why});
      call.waiting.erase(w);
      ids.push_back(id);
    }
    for (auto it = stacks_calls_.begin(); it != stacks_calls_.end();)
      it = it->second.asker == node ? stacks_calls_.erase(it) : std::next(it);
    for (std::uint64_t id : ids) finish_stacks(id);
  }

  void finish_stacks(std::uint64_t id) {
    auto it = stacks_calls_.find(id);
    if (it == stacks_calls_.end() || !it->second.waiting.empty() || !it->second.held.empty())
      return;
    it->second.timer->cancel();
    connections_->send(
        it->second.asker,
        encode(ServerMessage{StacksEnd{it->second.asker_id, it->second.missing, ""}}));
    stacks_calls_.erase(it);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    for (auto& [id, call] : stacks_calls_) call.timer->cancel();
    stacks_calls_.clear();
    round_timer_.cancel();
    keep_alive_timer_.cancel();
    // Nothing held back goes unsaid.
    refusal_timer_.cancel();
    release_refusals();
    connections_->close_all();
  }

  void leave(const std::string& reason, const std::optional<tcp::endpoint>& own) {
    if (closed_) return;
    std::optional<NodeId> host = own ? connections_->admitted_from(*own) : std::nullopt;
    // Its own connection is not told: the hosting agent knows why it stops. close() drops it.
    apply(machine_.host_left(host, "left: " + reason, Clock::now()));
    close();
  }

  struct StacksCall {
    NodeId asker = 0;
    std::uint64_t asker_id = 0;
    std::map<NodeId, std::string> waiting;  // asked, not answered yet: how to name them
    std::deque<std::string> held;           // answers not yet handed to the asker's connection
    std::vector<StacksMissing> missing;
    std::shared_ptr<asio::steady_timer> timer;
  };
  static constexpr std::size_t kMaxStacksCalls = 4;
  // Relayed answers queued for the asker at once, at most (and one answer more).
  static constexpr std::size_t kRelayWindow = 2 << 20;

  asio::io_context& io_;
  ServerOptions options_;
  RoundMachine machine_;
  asio::steady_timer round_timer_;
  std::optional<Clock::time_point> armed_for_;
  asio::steady_timer keep_alive_timer_;
  std::shared_ptr<ServerConnections> connections_;
  RefusalThrottle refusals_;
  asio::steady_timer refusal_timer_;
  std::map<std::uint64_t, StacksCall> stacks_calls_;
  std::uint64_t next_stacks_id_ = 1;
  bool closed_ = false;
};

RendezvousServer::RendezvousServer(asio::io_context& io, ServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {
  impl_->connect(io);
}

RendezvousServer::~RendezvousServer() { impl_->close(); }

void RendezvousServer::listen(const tcp::endpoint& endpoint) { impl_->listen(endpoint); }

tcp::endpoint RendezvousServer::local_endpoint() const {
  return impl_->connections_->local_endpoint();
}

void RendezvousServer::close() { impl_->close(); }

void RendezvousServer::leave(const std::string& reason, std::optional<tcp::endpoint> own) {
  impl_->leave(reason, own);
}

const RoundMachine& RendezvousServer::machine() const { return impl_->machine_; }

std::size_t RendezvousServer::pending_connections() const { return impl_->connections_->pending(); }

std::size_t RendezvousServer::admitted_connections() const {
  return impl_->connections_->admitted();
}

FrameBytes RendezvousServer::partial_frame_bytes() const {
  return impl_->connections_->partial_frame_bytes();
}

}  // namespace trainrun::rendezvous
