#include "framed_connection.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using boost::system::error_code;

void prepare_socket(asio::ip::tcp::socket& socket) {
  int fd = socket.native_handle();
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
}

FramedConnection::FramedConnection(asio::ip::tcp::socket socket, std::size_t max_frame,
                                   std::chrono::steady_clock::duration violation_linger)
    : socket_(std::move(socket)),
      linger_timer_(socket_.get_executor()),
      violation_linger_(violation_linger),
      decoder_(max_frame) {
  error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("unknown peer")
             : fmt::format("{}:{}", remote.address().to_string(), remote.port());
}

void FramedConnection::start(FrameHandler on_frame, ErrorHandler on_error) {
  on_frame_ = std::move(on_frame);
  on_error_ = std::move(on_error);
  read_more();
}

void FramedConnection::read_more() {
  socket_.async_read_some(asio::buffer(read_buffer_), [self = shared_from_this()](error_code ec,
                                                                                  std::size_t n) {
    if (self->shut_down_) return;
    if (self->closing_) {
      // Closing: discard input until the peer closes its side (or the linger ends).
      if (ec) {
        self->finish_close();
      } else {
        self->read_more();
      }
      return;
    }
    if (ec) {
      self->fail(ec == asio::error::eof ? std::string("connection closed by peer") : ec.message());
      return;
    }
    if (self->head_.size() < kHeadBytes) {
      self->head_.append(self->read_buffer_.data(), std::min(n, kHeadBytes - self->head_.size()));
    }
    self->received_ += n;
    std::size_t used = 0;
    try {
      while (used < n && !self->closing_) {
        used += self->decoder_.feed(self->read_buffer_.data() + used, n - used);
        while (auto frame = self->decoder_.next()) {
          if (self->auth_) *frame = self->auth_->open(std::move(*frame));
          if (self->on_frame_) self->on_frame_(std::move(*frame));
          if (self->closing_) break;
        }
      }
    } catch (const FrameError& e) {
      auto handler = self->on_error_;
      if (handler) handler(e.what(), true);
      if (!self->closing_) self->close_gracefully(self->violation_linger_);
    }
    if (!self->charge_partial_frame()) {
      return self->fail("the server holds too many partial messages (its byte budget is used up)");
    }
    if (!self->shut_down_) self->read_more();
  });
}

void FramedConnection::set_budget(std::shared_ptr<ByteBudget> budget) {
  if (budget_) budget_->resize(charged_, 0);
  budget_ = std::move(budget);
  charge_partial_frame();
}

// False when the partial frame does not fit in the budget: it is dropped, and so is the charge.
bool FramedConnection::charge_partial_frame() {
  if (!budget_) return true;
  if (!closing_ && budget_->resize(charged_, decoder_.buffered())) return true;
  budget_->resize(charged_, 0);
  decoder_ = FrameDecoder();
  if (closing_) return true;
  over_budget_ = true;
  return false;
}

void FramedConnection::send(const std::string& body) {
  if (closing_ || overflowed_) return;
  std::string frame = encode_frame(auth_ ? auth_->seal(body) : body);
  if (queued_bytes_ + frame.size() > kMaxQueuedBytes) {
    // Reported from the loop, not from inside send(): the caller may be iterating its peers.
    overflowed_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->shut_down_) {
        self->fail(
            fmt::format("peer is not reading its messages ({} bytes queued)", self->queued_bytes_));
      }
    });
    return;
  }
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
  write_more();
}

void FramedConnection::when_drained(std::size_t below, std::function<void()> drained) {
  drained_below_ = below;
  on_drained_ = std::move(drained);
  check_drained();
}

void FramedConnection::check_drained() {
  if (!on_drained_ || queued_bytes_ > drained_below_) return;
  asio::post(socket_.get_executor(), [self = shared_from_this(), drained = std::move(on_drained_)] {
    if (!self->closing_ && !self->shut_down_) drained();
  });
  on_drained_ = nullptr;
}

// Frames go to the kernel at once when it takes them (the common case: small messages), so
// what was sent is always known to the byte. Only a full socket buffer waits for the loop.
void FramedConnection::write_more() {
  if (waiting_writable_ || shut_down_ || write_failed_) return;
  while (!queue_.empty()) {
    const std::string& frame = queue_.front();
    ssize_t n = ::send(socket_.native_handle(), frame.data() + front_sent_,
                       frame.size() - front_sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        waiting_writable_ = true;
        socket_.async_wait(asio::ip::tcp::socket::wait_write,
                           [self = shared_from_this()](error_code ec) {
                             self->waiting_writable_ = false;
                             if (self->shut_down_) return;
                             if (ec) return self->write_failed(ec.message());
                             self->write_more();
                           });
        return;
      }
      // Reported from the loop, not from inside send(): the caller may be iterating its peers.
      write_failed_ = true;
      std::string why = std::strerror(errno);
      asio::post(socket_.get_executor(),
                 [self = shared_from_this(), why] { self->write_failed(why); });
      return;
    }
    front_sent_ += static_cast<std::size_t>(n);
    if (front_sent_ == frame.size()) {
      queued_bytes_ -= frame.size();
      queue_.pop_front();
      front_sent_ = 0;
    }
  }
  check_drained();
  if (closing_ || sending_finished_) {
    error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  }
}

void FramedConnection::finish_sending() {
  if (closing_ || shut_down_) return;
  sending_finished_ = true;
  write_more();
}

void FramedConnection::write_failed(const std::string& why) {
  if (shut_down_) return;
  if (closing_) return finish_close();
  fail(why);
}

void FramedConnection::close_gracefully(std::chrono::steady_clock::duration linger) {
  if (closing_ || shut_down_) return;
  closing_ = true;
  on_frame_ = nullptr;
  on_error_ = nullptr;
  linger_timer_.expires_after(linger);
  linger_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->finish_close();
  });
  write_more();
}

void FramedConnection::close_now() {
  on_frame_ = nullptr;
  on_error_ = nullptr;
  closing_ = true;
  finish_close();
}

void FramedConnection::abandon() {
  if (shut_down_) return;
  on_frame_ = nullptr;
  on_error_ = nullptr;
  closing_ = true;
  // Without waiting: a frame is finished from the byte where it stopped, and nothing follows a
  // frame the socket did not take whole.
  std::size_t offset = front_sent_;
  for (const std::string& frame : queue_) {
    if (write_failed_) break;
    std::size_t left = frame.size() - offset;
    ssize_t n =
        ::send(socket_.native_handle(), frame.data() + offset, left, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(left)) break;
    offset = 0;
  }
  finish_close();
}

void FramedConnection::fail(const std::string& why) {
  auto handler = std::move(on_error_);
  on_frame_ = nullptr;
  on_error_ = nullptr;
  closing_ = true;
  finish_close();
  if (handler) handler(why, false);
}

void FramedConnection::finish_close() {
  if (shut_down_) return;
  shut_down_ = true;
  linger_timer_.cancel();
  error_code ignored;
  socket_.close(ignored);
  queue_.clear();
  front_sent_ = 0;
  queued_bytes_ = 0;
  charge_partial_frame();  // closing: releases the charge
}

}  // namespace trainrun::rendezvous
