#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "etcd_calls.hpp"
#include "etcd_membership.hpp"
#include "etcd_round.hpp"
#include "etcd_state_writer.hpp"
#include "etcd_watch.hpp"

namespace trainrun::rendezvous {

// Which agent writes the change that the keys as watched (joins, answers, dones, what failed, a
// lease gone) or a deadline make due, and when: one agent, not every one (they would collide).
// The agent watching every key (the lowest live node id) writes at once; the others read and
// write only what is still due after a pause that grows with their place, in case the lowest is
// gone or slow: `always` for a lease gone or a deadline, else only while the state does not show
// this agent's own keys. That pause is longer (the lowest may still be starting, and a lowest
// gone is found by its lease), and both begin again while the state keeps changing (the lowest
// is at work): 64 agents each writing what the lowest is about to write collide.
class EtcdRefresh {
 public:
  // `ready`: the job goes on here and the lease is granted.
  EtcdRefresh(boost::asio::io_context& io, EtcdCalls& calls, EtcdWatch& watch,
              const EtcdMembership& member, EtcdStateWriter& writer, const EtcdRound& round,
              std::string node_id, std::function<bool()> ready)
      : calls_(calls),
        watch_(watch),
        member_(member),
        writer_(writer),
        round_(round),
        node_id_(std::move(node_id)),
        ready_(std::move(ready)),
        tick_timer_(io) {}

  // The keys as watched changed: the agent that writes, writes what is due.
  void consider();
  // After a pause, where the state still does not show what is due (see above).
  void check_later(bool always);
  // A watch response taken in; `node_gone`: a node key went away.
  void taken(bool node_gone);
  // The state may next change by the clock alone at `at` (Unix seconds).
  void arm(const std::optional<double>& at);
  void cancel() { tick_timer_.cancel(); }

 private:
  bool is_due() const;

  EtcdCalls& calls_;
  EtcdWatch& watch_;
  const EtcdMembership& member_;
  EtcdStateWriter& writer_;
  const EtcdRound& round_;
  std::string node_id_;
  std::function<bool()> ready_;
  std::optional<Clock::time_point> fallback_due_;  // when check_later()'s pause ends
  bool fallback_always_ = false;
  static constexpr Clock::duration kFallbackPause = std::chrono::milliseconds(100);
  static constexpr Clock::duration kOwnKeysPause = std::chrono::seconds(1);
  boost::asio::steady_timer tick_timer_;
  // A timer that had already fired when this was destroyed still runs its function, whatever
  // cancel() says: each checks this first.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace trainrun::rendezvous
