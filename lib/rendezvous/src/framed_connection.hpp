#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "frame.hpp"
#include "trainrun/rendezvous/byte_budget.hpp"

namespace trainrun::rendezvous {

// FD_CLOEXEC (workers must not inherit the rendezvous socket, or a dead agent's connection would
// stay open in its orphans) and TCP_NODELAY (messages are small and latency bound).
void prepare_socket(boost::asio::ip::tcp::socket& socket);

// One TCP connection carrying frames, on an io_context, never blocking. Owned through
// shared_ptr: pending operations keep it alive. Memory is bounded: one partial incoming frame
// (at most the decoder's limit) and at most kMaxQueuedBytes of unsent frames.
class FramedConnection : public std::enable_shared_from_this<FramedConnection> {
 public:
  static constexpr std::size_t kMaxQueuedBytes = 8 << 20;

  using FrameHandler = std::function<void(std::string body)>;
  // `violation` true: the peer broke the framing rules and the connection is still open, so the
  // owner can say why before closing it. false: the connection is closed (EOF, error).
  using ErrorHandler = std::function<void(const std::string& why, bool violation)>;

  // A frame that breaks the rules closes the connection, waiting at most `violation_linger` for
  // the peer's close after what the owner says (ConnectionOptions::reject_linger).
  FramedConnection(boost::asio::ip::tcp::socket socket, std::size_t max_frame,
                   std::chrono::steady_clock::duration violation_linger);

  void start(FrameHandler on_frame, ErrorHandler on_error);
  void set_max_frame(std::size_t max_frame) { decoder_.set_max_size(max_frame); }
  // From now on every frame sent is sealed and every frame received must open with `keys` (see
  // FrameAuth); one that does not is a violation, reported through the ErrorHandler.
  void authenticate(SessionKeys keys) { auth_.emplace(std::move(keys)); }
  bool authenticated() const { return auth_.has_value(); }
  // Counts this connection's partial incoming frame against `budget` (shared with other
  // connections), moving its charge from the budget it had. When the next bytes would take the
  // budget past its limit, the partial frame is dropped and the connection closed as by an
  // error (the error handler's `violation` false; over_budget() true).
  void set_budget(std::shared_ptr<ByteBudget> budget);
  bool over_budget() const { return over_budget_; }

  // Frames and queues `body`. Ignored once closing.
  void send(const std::string& body);
  // Bytes framed and not yet taken by the kernel. when_drained: `drained` once, from the loop,
  // when at most `below` are (a large sender's pace); replaces one not yet made.
  std::size_t queued_bytes() const { return queued_bytes_; }
  void when_drained(std::size_t below, std::function<void()> drained);

  // Sends what is queued, half-closes, and waits at most `linger` for the peer to close, so a
  // last message is not lost to a reset. No handler is called after this.
  void close_gracefully(std::chrono::steady_clock::duration linger);
  // Closes at once. No handler is called after this.
  void close_now();
  // For a peer that is gone or stopped, which would never acknowledge a graceful close: writes
  // what is queued as far as the socket takes it without waiting (a stopped peer finds it when
  // it resumes), then closes at once. No handler is called after this.
  void abandon();

  // Half-closes once what is queued is sent, and goes on reading: what the peer says to the end
  // of our input still comes through the handlers (a client's last question to a silent peer).
  void finish_sending();

  // The first bytes received on this connection (at most kHeadBytes) and the count of all of
  // them: what a peer that is not a trainrun one sent, to name it.
  static constexpr std::size_t kHeadBytes = 48;
  const std::string& head() const { return head_; }
  std::size_t received() const { return received_; }

  bool closing() const { return closing_; }
  const std::string& peer() const { return peer_; }
  boost::asio::ip::tcp::socket& socket() { return socket_; }

 private:
  void read_more();
  void write_more();
  void write_failed(const std::string& why);
  void fail(const std::string& why);
  void finish_close();
  bool charge_partial_frame();
  void check_drained();

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer linger_timer_;
  std::chrono::steady_clock::duration violation_linger_;
  FrameDecoder decoder_;
  std::optional<FrameAuth> auth_;
  std::array<char, 4096> read_buffer_{};
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;
  std::size_t front_sent_ = 0;  // bytes of queue_.front() already in the kernel
  bool waiting_writable_ = false;
  bool write_failed_ = false;
  bool closing_ = false;
  bool shut_down_ = false;
  bool sending_finished_ = false;
  std::string head_;
  std::size_t received_ = 0;
  bool overflowed_ = false;  // too much unsent: failing soon, send nothing more
  std::function<void()> on_drained_;
  std::size_t drained_below_ = 0;
  std::shared_ptr<ByteBudget> budget_;
  std::size_t charged_ = 0;  // what decoder_ holds, as counted in budget_
  bool over_budget_ = false;
  std::string peer_;
  FrameHandler on_frame_;
  ErrorHandler on_error_;
};

}  // namespace trainrun::rendezvous
