#include "tee_reader.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "file_io.hpp"
#include "log.hpp"

namespace trainrun::launch {

namespace {

// A log file that cannot be written (disk full, I/O error) costs the file, not the job: say so
// once, on trainrun's stderr, and keep the console copy going. The reader is given only the
// descriptor, so the name comes from /proc.
void report_log_write_failure(int file_fd, int error) {
  char path[4096];
  std::string link = "/proc/self/fd/" + std::to_string(file_fd);
  ssize_t n = ::readlink(link.c_str(), path, sizeof path - 1);
  std::string name = n > 0 ? std::string(path, static_cast<size_t>(n)) : "a log file";
  say("cannot write " + name + ": " + std::strerror(error) +
      "; the rest of this stream goes to the console only");
}

}  // namespace

void LineSplitter::feed(const char* data, size_t size, std::string& out) {
  const char* end = data + size;
  while (data < end) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', end - data));
    if (!nl) {
      partial_.append(data, end);
      if (partial_.size() >= kMaxLine) {
        out += prefix_;
        out += partial_;
        out += '\n';
        partial_.clear();
      }
      return;
    }
    out += prefix_;
    if (!partial_.empty()) {
      out += partial_;
      partial_.clear();
    }
    out.append(data, nl + 1);
    data = nl + 1;
  }
}

void LineSplitter::finish(std::string& out) {
  if (partial_.empty()) return;
  out += prefix_;
  out += partial_;
  out += '\n';
  partial_.clear();
}

TeeReader::TeeReader(boost::asio::io_context& io, int pipe_fd, int file_fd, Console* console,
                     std::string prefix)
    : pipe_(io, pipe_fd),
      file_fd_(file_fd),
      console_(console),
      splitter_(std::move(prefix)),
      buffer_(64 * 1024) {}

TeeReader::~TeeReader() {
  if (file_fd_ >= 0) ::close(file_fd_);
}

void TeeReader::start(std::function<void()> on_closed) {
  on_closed_ = std::move(on_closed);
  read_more();
}

void TeeReader::drain() {
  draining_ = true;
  resume();
}

void TeeReader::resume() {
  if (!paused_) return;
  paused_ = false;
  read_more();
}

void TeeReader::read_more() {
  auto self = shared_from_this();
  // Backpressure: leave the data in the pipe, where it blocks the worker, not in our memory.
  if (!draining_ && console_->full()) {
    paused_ = true;
    console_->when_not_full([self] { self->resume(); });
    return;
  }
  pipe_.async_read_some(boost::asio::buffer(buffer_),
                        [self](boost::system::error_code ec, size_t n) {
                          if (n > 0) {
                            if (self->file_ok_ && self->file_fd_ >= 0) {
                              self->file_ok_ = write_all(self->file_fd_, self->buffer_.data(), n);
                              if (!self->file_ok_) report_log_write_failure(self->file_fd_, errno);
                            }
                            if (!self->console_->closed()) {
                              self->lines_.clear();
                              self->splitter_.feed(self->buffer_.data(), n, self->lines_);
                              self->console_->write(self->lines_.data(), self->lines_.size());
                            }
                          }
                          if (!ec) {
                            self->read_more();
                            return;
                          }
                          self->lines_.clear();
                          self->splitter_.finish(self->lines_);
                          self->console_->write(self->lines_.data(), self->lines_.size());
                          boost::system::error_code ignored;
                          self->pipe_.close(ignored);
                          if (self->on_closed_) self->on_closed_();
                        });
}

}  // namespace trainrun::launch
