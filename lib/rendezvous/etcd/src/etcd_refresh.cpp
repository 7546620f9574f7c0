#include "etcd_refresh.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "trainrun/base/system.hpp"

namespace trainrun::rendezvous {

void EtcdRefresh::consider() {
  if (!ready_()) return;
  if (watch_.writing() && is_due()) writer_.enqueue_refresh();
}

void EtcdRefresh::check_later(bool always) {
  if (!ready_()) return;
  if (watch_.writing()) return consider();
  fallback_always_ = fallback_always_ || always;
  const auto& live = watch_.view().keys.live;
  const auto place = std::distance(live.begin(), live.lower_bound(node_id_));
  const auto due = Clock::now() + (always ? kFallbackPause : kOwnKeysPause) * (1 + place);
  if (fallback_due_ && *fallback_due_ <= due) return;
  fallback_due_ = due;
  calls_.after(due - Clock::now(), [this, due, seen = member_.seen_revision()] {
    if (fallback_due_ != due) return;  // an earlier one was armed since
    fallback_due_.reset();
    const bool always = std::exchange(fallback_always_, false);
    if (!always && !member_.own_keys_pending()) return;
    // The state changed meanwhile: the agent that writes it is at work; another pause.
    if (member_.seen_revision() != seen) return check_later(always);
    writer_.enqueue_refresh();
  });
}

void EtcdRefresh::taken(bool node_gone) {
  if (watch_.writing()) {
    if (!watch_.state_pending()) consider();  // else once the state is taken
    return;
  }
  // The lowest is gone and this agent comes next: it reads, and watches every key.
  if (node_gone && watch_.lowest()) return watch_.watch_everything();
  if (node_gone) check_later(true);
}

void EtcdRefresh::arm(const std::optional<double>& at) {
  tick_timer_.cancel();
  if (!at) return;
  const double wait = std::max(0.0, *at - unix_time()) + 0.05;
  tick_timer_.expires_after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait)));
  tick_timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
    if (alive.expired() || ec) return;
    check_later(true);
  });
}

bool EtcdRefresh::is_due() const {
  const EtcdView& view = watch_.view();
  const std::optional<EtcdRoundState> mine = round_.state_of(view.stored, *view.generation);
  if (!mine) return false;
  EtcdRoundState probe = *mine;
  return round_.apply(
      probe, view.keys, [this](EtcdRoundState& s, double now) { return round_.tick(s, now); },
      unix_time());
}

}  // namespace trainrun::rendezvous
