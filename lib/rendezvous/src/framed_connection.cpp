#include "trainrun/rendezvous/framed_connection.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

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

FramedConnection::FramedConnection(asio::ip::tcp::socket socket, std::size_t max_frame)
    : socket_(std::move(socket)), linger_timer_(socket_.get_executor()), decoder_(max_frame) {
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
      if (!self->closing_) self->close_gracefully(std::chrono::seconds(1));
    }
    if (!self->shut_down_) self->read_more();
  });
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

void FramedConnection::write_more() {
  if (writing_ || shut_down_) return;
  if (queue_.empty()) {
    if (closing_) {
      error_code ignored;
      socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    }
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(queue_.front()),
                    [self = shared_from_this()](error_code ec, std::size_t) {
                      self->writing_ = false;
                      if (self->shut_down_) return;
                      self->queued_bytes_ -= self->queue_.front().size();
                      self->queue_.pop_front();
                      if (ec) {
                        if (self->closing_) return self->finish_close();
                        return self->fail(ec.message());
                      }
                      self->write_more();
                    });
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
  // A write in progress may have sent part of the front frame: nothing can follow it without
  // waiting for the rest.
  if (!writing_) {
    for (const std::string& frame : queue_) {
      ssize_t n =
          ::send(socket_.native_handle(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n != static_cast<ssize_t>(frame.size())) break;
    }
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
  queued_bytes_ = 0;
}

}  // namespace trainrun::rendezvous
