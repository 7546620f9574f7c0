#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>

#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous {

// A client's half of liveness once admitted: a heartbeat every keep_alive_interval, and the
// server taken for lost once nothing has come from it for heartbeat_timeout (the server's values,
// from `welcome`). Owned through shared_ptr: its timer holds it weakly.
class KeepAlive : public std::enable_shared_from_this<KeepAlive> {
 public:
  using Beat = std::function<void()>;
  using Silent = std::function<void()>;

  explicit KeepAlive(boost::asio::io_context& io) : timer_(io) {}

  // The server's values with floors, so that its zeros cannot make the keep-alive spin.
  static LivenessOptions floored(const LivenessOptions& server);

  // Counts the silence from now. `beat` sends a heartbeat; `silent` is called once, and then
  // nothing more.
  void start(const LivenessOptions& server, Beat beat, Silent silent);
  // Something came from the server.
  void heard() { last_heard_ = Clock::now(); }
  void cancel();
  const LivenessOptions& liveness() const { return liveness_; }

 private:
  void arm();

  boost::asio::steady_timer timer_;
  LivenessOptions liveness_;
  Beat beat_;
  Silent silent_;
  Clock::time_point last_heard_;
  bool running_ = false;
};

}  // namespace trainrun::rendezvous
