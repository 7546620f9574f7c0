#include "diagnosis_relay.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

namespace trainrun::launch {

namespace asio = boost::asio;

std::shared_ptr<DiagnosisRelay> DiagnosisRelay::open(asio::io_context& io, int channel,
                                                     Notice notice) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    ::close(channel);
    return nullptr;
  }
  std::shared_ptr<DiagnosisRelay> relay(
      new DiagnosisRelay(io, channel, fds[0], fds[1], std::move(notice)));
  relay->read_worker();
  relay->read_asker();
  return relay;
}

DiagnosisRelay::DiagnosisRelay(asio::io_context& io, int channel, int inner, int asker,
                               Notice notice)
    : channel_(io, asio::local::stream_protocol(), channel),
      inner_(io, asio::local::stream_protocol(), inner),
      asker_(asker),
      notice_(std::move(notice)) {
  // The asker's requests and answers are written as they come, never waited on.
  channel_.non_blocking(true);
  inner_.non_blocking(true);
}

DiagnosisRelay::~DiagnosisRelay() { close(); }

void DiagnosisRelay::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  channel_.close(ignored);
  inner_.close(ignored);
  ::close(asker_);
  asker_ = -1;
}

void DiagnosisRelay::end_asker() {
  boost::system::error_code ignored;
  inner_.shutdown(asio::socket_base::shutdown_send, ignored);
}

void DiagnosisRelay::read_worker() {
  // Waited for, then read here: what the worker wrote is never held in a read still to be
  // handed over, so that drain() takes it in order.
  channel_.async_wait(asio::socket_base::wait_read,
                      [self = shared_from_this()](boost::system::error_code ec) {
                        if (self->closed_) return;
                        if (!ec && self->drain()) self->read_worker();
                      });
}

bool DiagnosisRelay::drain() {
  while (!closed_ && !worker_ended_) {
    const ssize_t n =
        ::recv(channel_.native_handle(), worker_buffer_, sizeof worker_buffer_, MSG_DONTWAIT);
    if (n > 0) {
      take(worker_buffer_, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // The worker is gone: the asker reads what came before, then the end.
    worker_ended_ = true;
    if (asker_writing_.empty()) end_asker();
  }
  return false;
}

void DiagnosisRelay::take(const char* data, std::size_t size) {
  while (size > 0) {
    if (line_ == Line::passing || line_ == Line::dropping) {
      const char* end = static_cast<const char*>(std::memchr(data, '\n', size));
      const std::size_t n = end ? static_cast<std::size_t>(end - data) + 1 : size;
      if (line_ == Line::passing) pass(data, n);
      if (end) line_ = Line::start;
      data += n, size -= n;
      continue;
    }
    // The start of a line, or a notice: taken a byte at a time until it is known.
    const char c = *data++;
    --size;
    head_ += c;
    if (line_ == Line::start) {
      if (head_.size() < 2 && c != '\n') continue;
      if (head_ == "0 ") {
        line_ = Line::notice;
        continue;
      }
      // Another line: an answer, passed on unless too much waits already (it is stale then).
      line_ =
          to_asker_.size() + asker_writing_.size() > kMaxQueued ? Line::dropping : Line::passing;
      if (line_ == Line::passing) pass(head_.data(), head_.size());
      if (c == '\n') line_ = Line::start;
      head_.clear();
      continue;
    }
    if (c == '\n') {
      const std::string text = head_.substr(2, head_.size() - 3);
      head_.clear();
      line_ = Line::start;
      if (notice_) notice_(text);
      if (closed_) return;
    } else if (head_.size() > kMaxNotice) {
      line_ = Line::passing;
      pass(head_.data(), head_.size());
      head_.clear();
    }
  }
}

void DiagnosisRelay::pass(const char* data, std::size_t size) {
  to_asker_.append(data, size);
  if (asker_writing_.empty()) write_asker();
}

void DiagnosisRelay::write_asker() {
  if (to_asker_.empty()) {
    if (worker_ended_) end_asker();
    return;
  }
  asker_writing_.swap(to_asker_);
  asio::async_write(inner_, asio::buffer(asker_writing_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      if (self->closed_) return;
                      self->asker_writing_.clear();
                      if (!ec) self->write_asker();
                    });
}

void DiagnosisRelay::read_asker() {
  inner_.async_read_some(asio::buffer(asker_buffer_),
                         [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                           if (self->closed_ || ec) return;
                           // Requests are a line each; a worker that reads none of them gets no
                           // more than this.
                           if (self->to_worker_.size() < kMaxNotice)
                             self->to_worker_.append(self->asker_buffer_, n);
                           if (self->worker_writing_.empty()) self->write_worker();
                           self->read_asker();
                         });
}

void DiagnosisRelay::write_worker() {
  if (to_worker_.empty()) return;
  worker_writing_.swap(to_worker_);
  asio::async_write(channel_, asio::buffer(worker_writing_),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      if (self->closed_) return;
                      self->worker_writing_.clear();
                      if (!ec) self->write_worker();
                    });
}

}  // namespace trainrun::launch
