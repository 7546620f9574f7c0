#include "etcd_calls.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrun::rendezvous {

using json = nlohmann::json;
using namespace std::chrono_literals;

void EtcdCalls::call(const std::string& path, const json& body, std::function<void(const json&)> ok,
                     std::function<void()> retry) {
  client_->post(path, body.dump(), 5s, [this, path, ok, retry](EtcdReply r) {
    if (hooks_.finished()) return;
    if (!r.local_ip.empty()) local_ip_ = r.local_ip;
    if (!r.peer_ip.empty()) peer_ip_ = r.peer_ip;
    if (r.ok()) {
      json j = json::parse(r.body, nullptr, false);
      if (!j.is_discarded() && j.is_object()) {
        backoff_.reset();
        return ok(j);
      }
    }
    if (!r.transient()) {
      return hooks_.fail(Stop{StopCause::rejected,
                              fmt::format("{} does not answer as etcd's v3 API does ({} on {}); "
                                          "is it an etcd 3.4+ client endpoint?",
                                          endpoint_, r.describe(), path),
                              1, std::nullopt});
    }
    unreachable(r, retry);
  });
}

void EtcdCalls::unreachable(const EtcdReply& r, std::function<void()> retry) {
  const auto now = Clock::now();
  const std::optional<Clock::duration> wait = backoff_.failed(r.describe(), now);
  if (!wait) {
    return hooks_.fail(
        Stop{StopCause::server_lost,
             fmt::format("etcd at {} unreachable for {:.0f} s ({}); giving up", endpoint_,
                         in_seconds(backoff_.elapsed(now)), backoff_.summary()),
             1, std::nullopt});
  }
  if (!last_unreachable_log_ || now - *last_unreachable_log_ >= retry_.log_interval) {
    last_unreachable_log_ = now;
    hooks_.log(fmt::format("etcd at {} not reachable ({}); retrying for up to {:.0f} s", endpoint_,
                           r.describe(), in_seconds(backoff_.deadline())));
  }
  after(*wait, retry);
}

void EtcdCalls::after(Clock::duration d, std::function<void()> fn) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, d);
  timers_.push_back(timer);
  timer->async_wait(
      [this, alive = std::weak_ptr<int>(alive_), timer, fn](boost::system::error_code ec) {
        if (alive.expired() || ec || hooks_.finished()) return;
        timers_.erase(std::remove(timers_.begin(), timers_.end(), timer), timers_.end());
        fn();
      });
}

void EtcdCalls::cancel() {
  for (auto& t : timers_) t->cancel();
  timers_.clear();
}

}  // namespace trainrun::rendezvous
