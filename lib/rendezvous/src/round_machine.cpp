#include "trainrun/rendezvous/round_machine.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrun/base/wording.hpp"
#include "trainrun/rendezvous/conclusion.hpp"

namespace trainrun::rendezvous {
namespace {


template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

bool contains(const std::vector<NodeId>& v, NodeId id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

void erase(std::vector<NodeId>& v, NodeId id) {
  v.erase(std::remove(v.begin(), v.end(), id), v.end());
}

void keep_earliest(std::optional<Clock::time_point>& best, Clock::time_point t) {
  if (!best || t < *best) best = t;
}

}  // namespace

RoundMachine::RoundMachine(RoundOptions options, LivenessOptions liveness, std::string endpoint,
                           Clock::time_point now)
    : options_(std::move(options)),
      liveness_(liveness),
      endpoint_(std::move(endpoint)),
      next_status_(now) {}

std::string RoundMachine::describe(NodeId id) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || !it->second.node) return fmt::format("connection #{}", id);
  const NodeDescriptor& n = *it->second.node;
  return fmt::format("{} ({}, pid {})", n.host, n.addr, n.pid);
}

Waiting RoundMachine::waiting_status(Clock::time_point now) const {
  Waiting w;
  w.round = phase_ == Phase::forming ? round_ : round_ + 1;
  w.joined = static_cast<int>(waiting_.size());
  w.min_nodes = count_requirement();
  w.max_nodes = options_.max_nodes;
  w.waited_s = forming_since_ ? in_seconds(now - *forming_since_) : 0.0;
  w.timeout_s = in_seconds(options_.join_timeout);
  return w;
}

Effects RoundMachine::connected(NodeId id, Clock::time_point now) {
  Effects fx;
  if (phase_ == Phase::ended) {
    fx.messages.push_back({id, *final_stop_, true});
    return fx;
  }
  sessions_[id] = Session{now, std::nullopt, now};
  if (!heard_floor_ || now < *heard_floor_) heard_floor_ = now;
  return fx;
}

Effects RoundMachine::received(NodeId id, const ClientMessage& message, Clock::time_point now) {
  Effects fx;
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return fx;
  it->second.last_heard = now;
  std::visit(Overloaded{
                 [&](const Join& m) { on_join(fx, id, m.node, now); },
                 [&](const Failure& m) { on_failure(fx, id, m, now); },
                 [&](const Done& m) { on_done(fx, id, m); },
                 [&](const Ended& m) { on_ended(fx, id, m); },
                 [&](const Leave& m) { on_lost(fx, id, "left: " + m.reason, now); },
                 [&](const Heartbeat&) {},
                 [&](const auto& m) {
                   std::string why = fmt::format("sent \"{}\" after the handshake", type_name(m));
                   drop(fx, id, why);
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

void RoundMachine::drop(Effects& fx, NodeId id, const std::string& reason, bool peer_lost) {
  fx.messages.push_back({id, Reject{reason}, true, peer_lost});
  std::string line = fmt::format("dropping {}: {}", describe(id), reason);
  auto it = sessions_.find(id);
  if (peer_lost && it != sessions_.end() && !it->second.node)
    fx.refusals.emplace_back("idle past the heartbeat timeout", std::move(line));
  else
    fx.log.push_back(std::move(line));
}

void RoundMachine::on_join(Effects& fx, NodeId id, const NodeDescriptor& node,
                           Clock::time_point now) {
  Session& session = sessions_.at(id);
  auto refuse = [&](const std::string& why) {
    drop(fx, id, why);
    on_lost(fx, id, why, now);
  };
  if ((phase_ == Phase::running || phase_ == Phase::concluding) && contains(participants_, id)) {
    return refuse("joined again while its round is running");
  }
  if (options_.static_ranks) {
    if (node.node_rank < 0 || node.node_rank >= options_.max_nodes) {
      return refuse(fmt::format(
          "node rank {} is out of range: this job has {} (0..{}); check --node-rank and "
          "--nnodes",
          node.node_rank, count_of(options_.max_nodes, "node"), options_.max_nodes - 1));
    }
    for (const auto& [other_id, other] : sessions_) {
      if (other_id != id && other.node && other.node->node_rank == node.node_rank) {
        return refuse(fmt::format("node rank {} is already taken by {}; check --node-rank",
                                  node.node_rank, describe(other_id)));
      }
    }
  } else if (node.master_port <= 0) {
    return refuse("join carries no reserved master_port");
  }
  bool already_waiting = session.node.has_value();
  session.node = node;
  if (already_waiting) return;  // a repeated join only refreshes the descriptor
  session.joined_at = now;
  waiting_.push_back(id);

  if (phase_ == Phase::forming) {
    if (!forming_since_) {
      forming_since_ = now;
      next_status_ = now + options_.status_interval;
    }
    fx.messages.push_back({id, waiting_status(now), false});
    maybe_complete(fx, now);
    return;
  }
  bool can_grow = phase_ == Phase::running && !options_.static_ranks &&
                  static_cast<int>(participants_.size()) < options_.max_nodes && done_.empty();
  if (can_grow) {
    std::set<NodeId> expected(participants_.begin(), participants_.end());
    expected.insert(waiting_.begin(), waiting_.end());
    std::string reason =
        fmt::format("node {} joined: scaling up from {}", describe(id),
                    count_of(static_cast<long long>(participants_.size()), "node"));
    begin_forming(fx, now, std::move(expected),
                  Restart{RestartCause::scale_up, reason, restart_count_, std::nullopt});
    return;
  }
  if (waiting_.size() == 1) next_status_ = now + options_.status_interval;
  fx.messages.push_back({id, waiting_status(now), false});
}

void RoundMachine::on_failure(Effects& fx, NodeId id, const Failure& report,
                              Clock::time_point now) {
  if (report.round != round_ || !contains(participants_, id)) return;
  if (phase_ == Phase::concluding) {
    // A node that fails again before it has stopped: its latest word counts.
    failures_[id] = Ended{report.round, report.failures, report.not_relayed};
    return;
  }
  // Reports from an earlier round (workers dying while being stopped) must not count twice.
  if (phase_ != Phase::running) return;
  const FailureReport& f = report.failure;
  std::string reason =
      fmt::format("worker failed on {}: rank {} (local rank {}) exited with code {}", f.host,
                  f.rank, f.local_rank, f.exit_code);
  if (restart_count_ < options_.max_restarts) {
    ++restart_count_;
    std::set<NodeId> expected(participants_.begin(), participants_.end());
    expected.insert(waiting_.begin(), waiting_.end());
    begin_forming(fx, now, std::move(expected),
                  Restart{RestartCause::worker_failed,
                          fmt::format("{}; restarting ({} of {})", reason, restart_count_,
                                      count_of(options_.max_restarts, "restart")),
                          restart_count_, f});
    return;
  }
  failures_[id] = reported_failures(report);
  begin_concluding(fx, now, no_restarts_left(options_.max_restarts, restart_count_));
}

// Every node of the round stops its workers and says what failed; nodes already done have
// nothing to add. The `stop` waits for them (or their loss, or the join timeout).
void RoundMachine::begin_concluding(Effects& fx, Clock::time_point now, const std::string& why) {
  phase_ = Phase::concluding;
  concluding_why_ = why;
  concluding_since_ = now;
  awaiting_.clear();
  for (NodeId p : participants_) {
    if (done_.count(p)) continue;
    awaiting_.insert(p);
    fx.messages.push_back({p, Halt{round_, "a worker failed; the job ends"}, false});
  }
  fx.log.push_back(fmt::format("round {} ends: a worker failed; waiting for {} to report", round_,
                               count_of(static_cast<long long>(awaiting_.size()), "node")));
  maybe_conclude(fx);
}

void RoundMachine::on_ended(Effects& fx, NodeId id, const Ended& ended) {
  if (phase_ != Phase::concluding || ended.round != round_ || !awaiting_.count(id)) return;
  take_report(failures_, id, ended);
  awaiting_.erase(id);
  maybe_conclude(fx);
}

// Once every node has said: the root cause by the one rule, the same `stop` to every node.
void RoundMachine::maybe_conclude(Effects& fx) {
  if (phase_ != Phase::concluding || !awaiting_.empty()) return;
  Stop stop = concluded_stop(failures_, concluding_why_);
  failures_.clear();
  end_job(fx, std::move(stop));
}
void RoundMachine::on_done(Effects& fx, NodeId id, const Done& done) {
  if (phase_ == Phase::concluding && done.round == round_ && awaiting_.erase(id)) {
    return maybe_conclude(fx);
  }
  if (phase_ != Phase::running || done.round != round_ || !contains(participants_, id)) return;
  done_.insert(id);
  if (done_.size() == participants_.size()) {
    end_job(fx, Stop{StopCause::finished,
                     participants_.size() == 1 ? std::string("the node finished")
                                                : fmt::format("all {} nodes finished",
                                                              participants_.size()),
                     0, std::nullopt});
  }
}

void RoundMachine::on_lost(Effects& fx, NodeId id, const std::string& why, Clock::time_point now) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  std::string who = describe(id);
  if (phase_ == Phase::concluding && contains(participants_, id)) {
    // What it reported before it went stays in the job's list.
    erase(participants_, id);
    awaiting_.erase(id);
    sessions_.erase(it);
    erase(waiting_, id);
    fx.log.push_back(fmt::format("node {} lost: {}", who, why));
    return maybe_conclude(fx);
  }
  bool was_participant = phase_ == Phase::running && contains(participants_, id);
  bool was_joined = it->second.node.has_value();
  sessions_.erase(it);
  erase(waiting_, id);
  expected_.erase(id);
  done_.erase(id);
  if (was_joined) fx.log.push_back(fmt::format("node {} lost: {}", who, why));

  if (was_participant) {
    erase(participants_, id);
    std::string reason = fmt::format("node {} lost ({})", who, why);
    int remaining = static_cast<int>(participants_.size() + waiting_.size());
    if (options_.static_ranks) {
      end_job(fx, Stop{StopCause::node_lost, reason + "; a static job cannot continue without it",
                       1, std::nullopt});
    } else if (restart_count_ >= options_.max_restarts) {
      end_job(fx, Stop{StopCause::node_lost,
                       fmt::format("{}; no restarts left ({} of {} used)", reason, restart_count_,
                                   count_of(options_.max_restarts, "restart")),
                       1, std::nullopt});
    } else if (remaining < options_.min_nodes) {
      end_job(fx, Stop{StopCause::node_lost,
                       fmt::format("{}; {} {}, fewer than the minimum of {}", reason,
                                   count_of(remaining, "node"), remaining == 1 ? "remains" : "remain",
                                   options_.min_nodes),
                       1, std::nullopt});
    } else {
      ++restart_count_;
      std::set<NodeId> expected(participants_.begin(), participants_.end());
      expected.insert(waiting_.begin(), waiting_.end());
      begin_forming(fx, now, std::move(expected),
                    Restart{RestartCause::node_lost,
                            fmt::format("{}; continuing with {} ({} of {})", reason,
                                        count_of(remaining, "node"), restart_count_,
                                        count_of(options_.max_restarts, "restart")),
                            restart_count_, std::nullopt});
    }
    return;
  }
  if (phase_ == Phase::forming) {
    if (waiting_.empty()) forming_since_.reset();
    maybe_complete(fx, now);
  }
}

void RoundMachine::begin_forming(Effects& fx, Clock::time_point now, std::set<NodeId> expected,
                                 const Restart& restart) {
  for (NodeId p : participants_) {
    fx.messages.push_back({p, restart, false});
    sessions_.at(p).node.reset();  // it must join the next round afresh
  }
  fx.log.push_back(fmt::format("round {} ends: {}", round_, restart.reason));
  participants_.clear();
  done_.clear();
  phase_ = Phase::forming;
  ++round_;
  expected_ = std::move(expected);
  forming_since_ = now;
  min_reached_at_.reset();
  next_status_ = now + options_.status_interval;
  maybe_complete(fx, now);
}

void RoundMachine::maybe_complete(Effects& fx, Clock::time_point now) {
  if (phase_ != Phase::forming) return;
  const int n = static_cast<int>(waiting_.size());
  if (n < count_requirement()) {
    min_reached_at_.reset();
    return;
  }
  if (!min_reached_at_) min_reached_at_ = now;
  if (options_.static_ranks || n >= options_.max_nodes) {
    return complete_round(
        fx, std::vector<NodeId>(waiting_.begin(), waiting_.begin() + options_.max_nodes));
  }
  // After a restart the survivors are known: once they are all back there is nobody to wait for.
  bool all_expected_back =
      !expected_.empty() && std::all_of(expected_.begin(), expected_.end(),
                                        [&](NodeId e) { return contains(waiting_, e); });
  if (all_expected_back || now - *min_reached_at_ >= options_.last_call_timeout) {
    complete_round(fx, waiting_);
  }
}

void RoundMachine::complete_round(Effects& fx, std::vector<NodeId> members) {
  std::vector<NodeDescriptor> nodes;
  nodes.reserve(members.size());
  for (NodeId id : members) nodes.push_back(*sessions_.at(id).node);
  std::vector<Assignment> assignments =
      assign_ranks(nodes, round_, options_.static_ranks,
                   options_.static_ranks ? &options_.static_master : nullptr);
  for (std::size_t i = 0; i < members.size(); ++i) {
    assignments[i].restart_count = restart_count_;
    assignments[i].max_restarts = options_.max_restarts;
    fx.messages.push_back({members[i], assignments[i], false});
  }
  for (NodeId id : members) erase(waiting_, id);
  participants_ = std::move(members);
  done_.clear();
  expected_.clear();
  phase_ = Phase::running;
  forming_since_.reset();
  min_reached_at_.reset();
  if (!waiting_.empty()) next_status_ = Clock::time_point::min();
  fx.log.push_back(fmt::format("round {} formed: {}, world size {}, master {}:{}, restart {}",
                               round_, count_of(static_cast<long long>(participants_.size()), "node"), assignments[0].world_size,
                               assignments[0].master_addr, assignments[0].master_port,
                               restart_count_));
}

void RoundMachine::end_job(Effects& fx, Stop stop) {
  for (const auto& entry : sessions_) fx.messages.push_back({entry.first, stop, true});
  fx.log.push_back(fmt::format("job ends ({}): {}", to_string(stop.cause), stop.reason));
  final_stop_ = std::move(stop);
  phase_ = Phase::ended;
  awaiting_.clear();
  failures_.clear();
  sessions_.clear();
  waiting_.clear();
  participants_.clear();
  expected_.clear();
  done_.clear();
}

Effects RoundMachine::host_left(std::optional<NodeId> host, const std::string& why,
                                Clock::time_point now) {
  Effects fx;
  if (phase_ == Phase::ended) return fx;
  std::string reason;
  auto it = host ? sessions_.find(*host) : sessions_.end();
  if (it != sessions_.end() && it->second.node) {
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
  end_job(fx, Stop{StopCause::node_lost, reason, 1, std::nullopt});
  for (std::size_t i = first; i < fx.messages.size(); ++i) {
    fx.messages[i].peer_lost = silent.count(fx.messages[i].to) > 0;
  }
  return fx;
}

Effects RoundMachine::tick(Clock::time_point now) {
  Effects fx;
  if (phase_ == Phase::ended) return fx;

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
    if (phase_ == Phase::ended) return fx;
    std::string why = fmt::format("no message for {:.0f} s (heartbeat timeout)",
                                  in_seconds(liveness_.heartbeat_timeout));
    drop(fx, id, why, /*peer_lost=*/true);
    on_lost(fx, id, why, now);
  }
  if (phase_ == Phase::ended) return fx;

  if (phase_ == Phase::forming) {
    maybe_complete(fx, now);
    if (phase_ == Phase::forming && forming_since_ &&
        now - *forming_since_ >= options_.join_timeout) {
      int need = count_requirement();
      int have = static_cast<int>(waiting_.size());
      end_job(fx,
              Stop{StopCause::join_timeout,
                   fmt::format("timed out after {:.0f} s waiting for nodes at {}: {} of {} "
                               "joined, {} missing",
                               in_seconds(options_.join_timeout), endpoint_, have, need, need - have),
                   1, std::nullopt});
      return fx;
    }
  } else {
    if (phase_ == Phase::concluding && now - concluding_since_ >= options_.join_timeout) {
      fx.log.push_back(fmt::format(
          "{} did not say what failed within {:.0f} s (join timeout); ending without them",
          count_of(static_cast<long long>(awaiting_.size()), "node"),
          in_seconds(options_.join_timeout)));
      awaiting_.clear();
      maybe_conclude(fx);
      return fx;
    }
    // Newcomers waiting on a job that is full give up after the join timeout on their own.
    std::vector<NodeId> expired;
    for (NodeId id : waiting_) {
      if (now - sessions_.at(id).joined_at >= options_.join_timeout) expired.push_back(id);
    }
    for (NodeId id : expired) {
      fx.messages.push_back(
          {id,
           Stop{StopCause::join_timeout,
                fmt::format("timed out after {:.0f} s: the job at {} is running with its maximum "
                            "of {}",
                            in_seconds(options_.join_timeout), endpoint_,
                            count_of(options_.max_nodes, "node")),
                1, std::nullopt},
           true});
      sessions_.erase(id);
      erase(waiting_, id);
    }
  }
  if (!waiting_.empty() && now >= next_status_) {
    Waiting status = waiting_status(now);
    for (NodeId id : waiting_) fx.messages.push_back({id, status, false});
    next_status_ = now + options_.status_interval;
  }
  return fx;
}

std::optional<Clock::time_point> RoundMachine::next_deadline() const {
  std::optional<Clock::time_point> best;
  if (phase_ == Phase::ended) return best;
  // A lower bound of every session's last message, made exact by tick(): the next deadline is
  // found without a pass over every session (once per event, that was quadratic in the nodes).
  if (heard_floor_ && !sessions_.empty()) {
    keep_earliest(best, *heard_floor_ + liveness_.heartbeat_timeout);
  }
  if (phase_ == Phase::forming) {
    if (min_reached_at_) keep_earliest(best, *min_reached_at_ + options_.last_call_timeout);
    if (forming_since_) keep_earliest(best, *forming_since_ + options_.join_timeout);
  } else {
    for (NodeId id : waiting_) {
      keep_earliest(best, sessions_.at(id).joined_at + options_.join_timeout);
    }
    if (phase_ == Phase::concluding) keep_earliest(best, concluding_since_ + options_.join_timeout);
  }
  if (!waiting_.empty()) keep_earliest(best, next_status_);
  return best;
}

}  // namespace trainrun::rendezvous
