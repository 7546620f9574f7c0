#include "round_machine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "trainrun/base/overloaded.hpp"

namespace trainrun::rendezvous {
namespace {

// The rules know members by a string: a connection's id in decimal.
std::string key(NodeId id) { return std::to_string(id); }
NodeId node_of(const std::string& key) { return std::stoull(key); }

// The rules' times are the steady clock's, since its epoch.
RoundTime at(Clock::time_point t) {
  return std::chrono::duration_cast<RoundTime>(t.time_since_epoch());
}
Clock::time_point time_point(RoundTime t) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(t));
}

void keep_earliest(std::optional<Clock::time_point>& best, Clock::time_point t) {
  if (!best || t < *best) best = t;
}

}  // namespace

RoundMachine::RoundMachine(RoundOptions options, LivenessOptions liveness, std::string endpoint,
                           Clock::time_point now)
    : rules_(std::move(options), endpoint),
      liveness_(liveness),
      endpoint_(std::move(endpoint)),
      next_status_(now) {}

bool RoundMachine::joined(NodeId id) const {
  return state_.waiter(key(id)) || state_.participant(key(id));
}

std::string RoundMachine::describe(NodeId id) const {
  const RoundMember* m = state_.waiter(key(id));
  if (!m) m = state_.participant(key(id));
  return m ? rendezvous::describe(*m) : fmt::format("connection #{}", id);
}

Waiting RoundMachine::waiting_status(Clock::time_point now, std::size_t joined) const {
  const RoundOptions& o = rules_.forming().options();
  Waiting w;
  w.round = state_.phase == Phase::forming ? state_.round : state_.round + 1;
  w.joined = static_cast<int>(joined);
  w.min_nodes = rules_.forming().count_requirement();
  w.max_nodes = o.max_nodes;
  w.waited_s = state_.forming_since ? in_seconds(at(now) - *state_.forming_since) : 0.0;
  w.timeout_s = in_seconds(o.join_timeout);
  return w;
}

Effects RoundMachine::connected(NodeId id, Clock::time_point now) {
  Effects fx;
  if (state_.phase == Phase::ended) {
    fx.messages.push_back({id, *state_.stop, true});
    return fx;
  }
  sessions_[id] = Session{now};
  if (!heard_floor_ || now < *heard_floor_) heard_floor_ = now;
  return fx;
}

Effects RoundMachine::received(NodeId id, const ClientMessage& message, Clock::time_point now) {
  Effects fx;
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return fx;
  it->second.last_heard = now;
  const std::string k = key(id);
  std::visit(Overloaded{
                 [&](const Join& m) { on_join(fx, id, m.node, now); },
                 [&](const Failure& m) { apply(fx, rules_.failure(state_, k, m, at(now)), now); },
                 [&](const Done& m) { apply(fx, rules_.done(state_, k, m.round), now); },
                 [&](const Ended& m) { apply(fx, rules_.ended(state_, k, m), now); },
                 [&](const Leave& m) { on_lost(fx, id, "left: " + m.reason, now); },
                 [&](const Abort& m) { apply(fx, rules_.abort(state_, k, m), now); },
                 [&](const Heartbeat&) {},
                 [&](const auto&) {
                   std::string why =
                       fmt::format("sent \"{}\" after the handshake", type_name(message));
                   drop(fx, id, Reject{why});
                   on_lost(fx, id, why, now);
                 },
             },
             message);
  return fx;
}

Effects RoundMachine::disconnected(NodeId id, const std::string& why, Clock::time_point now) {
  Effects fx;
  on_lost(fx, id, why, now);
  return fx;
}

void RoundMachine::drop(Effects& fx, NodeId id, const Reject& reject, bool peer_lost) {
  fx.messages.push_back({id, reject, true, peer_lost});
  std::string line = fmt::format("dropping {}: {}", describe(id), reject.reason);
  if (peer_lost && sessions_.count(id) && !joined(id))
    fx.refusals.emplace_back("idle past the heartbeat timeout", std::move(line));
  else
    fx.log.push_back(std::move(line));
}

void RoundMachine::on_join(Effects& fx, NodeId id, const NodeDescriptor& node,
                           Clock::time_point now) {
  const std::string k = key(id);
  if (auto refused = rules_.forming().refusal(state_, k, node)) {
    drop(fx, id, *refused);
    return on_lost(fx, id, refused->reason, now);
  }
  const bool again = state_.waiter(k) != nullptr;  // a repeated join only refreshes it
  const bool forming = state_.phase == Phase::forming;
  if (!again && forming) {
    // How the round goes, with this node, before it may form with it.
    if (!state_.forming_since) next_status_ = now + rules_.forming().options().status_interval;
    fx.messages.push_back({id, waiting_status(now, state_.waiting.size() + 1), false});
  }
  const RoundDecision d = rules_.forming().join(state_, k, node, at(now));
  apply(fx, d, now);
  if (again || forming || !d.restarted.empty()) return;
  if (state_.waiting.size() == 1) next_status_ = now + rules_.forming().options().status_interval;
  fx.messages.push_back({id, waiting_status(now, state_.waiting.size()), false});
}

void RoundMachine::on_lost(Effects& fx, NodeId id, const std::string& why, Clock::time_point now) {
  if (!sessions_.erase(id)) return;
  apply(fx, rules_.lost(state_, key(id), why, at(now)), now);
}

void RoundMachine::apply(Effects& fx, const RoundDecision& d, Clock::time_point now) {
  for (const std::string& id : d.restarted) fx.messages.push_back({node_of(id), *state_.restart});
  if (!d.restarted.empty()) next_status_ = now + rules_.forming().options().status_interval;
  if (!d.formed.empty()) {
    // Its members are connected: the round starts as it forms.
    rules_.forming().start(state_);
    for (std::size_t i = 0; i < d.formed.size(); ++i) {
      fx.messages.push_back({node_of(state_.participants[i].id), d.formed[i]});
    }
    if (!state_.waiting.empty()) next_status_ = Clock::time_point::min();
  }
  for (const std::string& id : d.halted) fx.messages.push_back({node_of(id), rules_.halt(state_)});
  for (const std::string& id : d.dropped) {
    fx.messages.push_back({node_of(id), rules_.forming().full_job_stop(), true});
    sessions_.erase(node_of(id));
  }
  if (d.ended) {
    for (const auto& entry : sessions_) fx.messages.push_back({entry.first, *state_.stop, true});
    sessions_.clear();
  }
  fx.log.insert(fx.log.end(), d.log.begin(), d.log.end());
}

Effects RoundMachine::host_left(std::optional<NodeId> host, const std::string& why,
                                Clock::time_point now) {
  Effects fx;
  if (state_.phase == Phase::ended) return fx;
  std::string reason;
  auto it = host ? sessions_.find(*host) : sessions_.end();
  if (it != sessions_.end() && joined(*host)) {
    std::string who = describe(*host);
    fx.log.push_back(fmt::format("node {} lost: {}", who, why));
    reason = fmt::format("node {} lost ({}); it hosted the rendezvous at {}", who, why, endpoint_);
  } else {
    reason = fmt::format("the node hosting the rendezvous at {} is gone ({})", endpoint_, why);
  }
  reason += ", so the job cannot continue";
  if (it != sessions_.end()) sessions_.erase(it);
  // Peers already silent past the heartbeat timeout would never acknowledge the stop: the
  // hosting agent must not linger for them on its way out.
  std::set<NodeId> silent;
  for (const auto& [id, s] : sessions_) {
    if (now - s.last_heard >= liveness_.heartbeat_timeout) silent.insert(id);
  }
  const std::size_t first = fx.messages.size();
  apply(fx, rules_.end(state_, Stop{StopCause::node_lost, reason, 1, std::nullopt}), now);
  for (std::size_t i = first; i < fx.messages.size(); ++i) {
    fx.messages[i].peer_lost = silent.count(fx.messages[i].to) > 0;
  }
  return fx;
}

Effects RoundMachine::tick(Clock::time_point now) {
  Effects fx;
  if (state_.phase == Phase::ended) return fx;

  std::vector<NodeId> silent;
  heard_floor_.reset();
  for (const auto& [id, s] : sessions_) {
    if (now - s.last_heard >= liveness_.heartbeat_timeout) {
      silent.push_back(id);
    } else if (!heard_floor_ || s.last_heard < *heard_floor_) {
      heard_floor_ = s.last_heard;
    }
  }
  for (NodeId id : silent) {
    if (state_.phase == Phase::ended) return fx;
    std::string why = fmt::format("no message for {:.0f} s (heartbeat timeout)",
                                  in_seconds(liveness_.heartbeat_timeout));
    drop(fx, id, Reject{why}, /*peer_lost=*/true);
    on_lost(fx, id, why, now);
  }
  if (state_.phase == Phase::ended) return fx;

  apply(fx, rules_.tick(state_, at(now)), now);
  if (state_.phase == Phase::ended) return fx;
  if (!state_.waiting.empty() && now >= next_status_) {
    const Waiting status = waiting_status(now, state_.waiting.size());
    for (const RoundMember& m : state_.waiting) {
      fx.messages.push_back({node_of(m.id), status, false});
    }
    next_status_ = now + rules_.forming().options().status_interval;
  }
  return fx;
}

std::optional<Clock::time_point> RoundMachine::next_deadline() const {
  std::optional<Clock::time_point> best;
  if (state_.phase == Phase::ended) return best;
  // A lower bound of every session's last message, made exact by tick(): the next deadline is
  // found without a pass over every session (once per event, that was quadratic in the nodes).
  if (heard_floor_ && !sessions_.empty()) {
    keep_earliest(best, *heard_floor_ + liveness_.heartbeat_timeout);
  }
  if (auto due = rules_.next_deadline(state_)) keep_earliest(best, time_point(*due));
  if (!state_.waiting.empty()) keep_earliest(best, next_status_);
  return best;
}

}  // namespace trainrun::rendezvous
