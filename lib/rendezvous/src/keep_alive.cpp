#include "keep_alive.hpp"

#include <algorithm>

namespace trainrun::rendezvous {

using boost::system::error_code;

LivenessOptions KeepAlive::floored(const LivenessOptions& server) {
  LivenessOptions l;
  l.keep_alive_interval =
      std::max<Clock::duration>(std::chrono::milliseconds(10), server.keep_alive_interval);
  l.heartbeat_timeout =
      std::max<Clock::duration>(std::chrono::milliseconds(20), server.heartbeat_timeout);
  return l;
}

void KeepAlive::start(const LivenessOptions& server, Beat beat, Silent silent) {
  liveness_ = floored(server);
  beat_ = std::move(beat);
  silent_ = std::move(silent);
  last_heard_ = Clock::now();
  running_ = true;
  arm();
}

void KeepAlive::cancel() {
  running_ = false;
  timer_.cancel();
}

void KeepAlive::arm() {
  timer_.expires_after(liveness_.keep_alive_interval);
  timer_.async_wait([weak = std::weak_ptr<KeepAlive>(shared_from_this())](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || !self->running_) return;
    if (Clock::now() - self->last_heard_ >= self->liveness_.heartbeat_timeout) {
      self->running_ = false;
      return self->silent_();
    }
    self->beat_();
    if (self->running_) self->arm();
  });
}

}  // namespace trainrun::rendezvous
