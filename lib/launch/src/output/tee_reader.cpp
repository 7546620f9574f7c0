#include "trainrun/launch/output/tee_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/core/log.hpp"

namespace trainrun::launch {

namespace {

// A log file that cannot be written (disk full, I/O error) costs the file, not the job nor the
// output: say so once, on trainrun's stderr, and keep the output on the console. The reader is
// given only the descriptor, so the name comes from /proc.
void report_log_write_failure(int file_fd, int error, const char* consequence) {
  char path[4096];
  std::string link = "/proc/self/fd/" + std::to_string(file_fd);
  ssize_t n = ::readlink(link.c_str(), path, sizeof path - 1);
  std::string name = n > 0 ? std::string(path, static_cast<size_t>(n)) : "a log file";
  say("cannot write " + name + ": " + std::strerror(error) + "; " + consequence, Level::warning);
}

}  // namespace

void LineSplitter::emit(std::string_view line, bool add_newline, std::string& out) const {
  if (!filters_.empty() &&
      std::none_of(filters_.begin(), filters_.end(),
                   [&](const std::string& f) { return line.find(f) != std::string_view::npos; }))
    return;
  if (!line_started_) out += prefix_;
  out.append(line.data(), line.size());
  if (add_newline) out += '\n';
}

void LineSplitter::flush_partial(std::string& out) {
  if (partial_.empty() || !filters_.empty()) return;
  emit(partial_, false, out);
  partial_.clear();
  line_started_ = true;
}

void LineSplitter::feed(const char* data, size_t size, std::string& out) {
  const char* end = data + size;
  while (data < end) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', end - data));
    if (!nl) {
      partial_.append(data, end);
      if (partial_.size() >= kMaxLine) {
        emit(partial_, true, out);
        partial_.clear();
        line_started_ = false;
      }
      return;
    }
    const std::string_view rest(data, static_cast<size_t>(nl + 1 - data));
    if (partial_.empty()) {
      emit(rest, false, out);
    } else {
      partial_.append(rest.data(), rest.size());
      emit(partial_, false, out);
      partial_.clear();
    }
    line_started_ = false;
    data = nl + 1;
  }
}

void LineSplitter::finish(std::string& out) {
  if (!partial_.empty()) {
    emit(partial_, true, out);
    partial_.clear();
  } else if (line_started_) {
    out += '\n';
  }
  line_started_ = false;
}

SharedLogFile::~SharedLogFile() {
  if (fd >= 0) ::close(fd);
}

TeeReader::TeeReader(boost::asio::io_context& io, int pipe_fd, int file_fd, Console* console,
                     std::string prefix, Duplicate duplicate, bool console_copy)
    : pipe_(io, pipe_fd),
      partial_quiet_(io),
      file_fd_(file_fd),
      console_(console),
      to_console_(console_copy),
      splitter_(prefix),
      duplicate_file_(std::move(duplicate.file)),
      duplicate_splitter_(std::move(prefix), std::move(duplicate.filters)),
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

void TeeReader::on_read(const char* data, size_t n) {
  if (on_data_) on_data_();
  if (file_ok_ && file_fd_ >= 0) {
    file_ok_ = write_all(file_fd_, data, n);
    if (!file_ok_) {
      report_log_write_failure(file_fd_, errno,
                               to_console_ ? "the rest of this stream goes to the console only"
                                           : "this stream goes to the console from here on");
      // The chunk that failed is shown whole: a line may be shown twice, none is lost.
      to_console_ = true;
    }
  }
  if (tail_) tail_->feed(data, n);
  if (to_console_ && !console_->closed() && pass_through_) {
    console_->write(data, n);
  } else if (to_console_ && !console_->closed()) {
    lines_.clear();
    splitter_.feed(data, n, lines_);
    console_->write(lines_.data(), lines_.size());
    watch_partial();
  }
  // The duplicate is a file: it keeps its lines when the console has gone away.
  if (duplicate_file_) {
    duplicate_lines_.clear();
    duplicate_splitter_.feed(data, n, duplicate_lines_);
    write_duplicate();
  }
}

void TeeReader::watch_partial() {
  partial_quiet_.cancel();
  if (!splitter_.holding()) return;
  partial_quiet_.expires_after(kPromptQuiet);
  std::weak_ptr<TeeReader> weak = shared_from_this();
  partial_quiet_.async_wait([weak](boost::system::error_code ec) {
    auto self = weak.lock();
    // A worker held back by a full console is no prompt: its line goes on once we read again.
    if (ec || !self || !self->splitter_.holding() || self->console_->closed() || self->paused_ ||
        self->console_->full())
      return;
    self->lines_.clear();
    self->splitter_.flush_partial(self->lines_);
    self->console_->write(self->lines_.data(), self->lines_.size());
  });
}

void TeeReader::write_duplicate() {
  if (duplicate_lines_.empty() || !duplicate_file_->ok) return;
  duplicate_file_->ok =
      write_all(duplicate_file_->fd, duplicate_lines_.data(), duplicate_lines_.size());
  if (!duplicate_file_->ok)
    report_log_write_failure(duplicate_file_->fd, errno, "no more lines are duplicated there");
}

void TeeReader::read_more() {
  auto self = shared_from_this();
  // Backpressure: leave the data in the pipe, where it blocks the worker, not in our memory.
  if (!draining_ && to_console_ && console_->full()) {
    paused_ = true;
    console_->when_not_full([self] { self->resume(); });
    return;
  }
  pipe_.async_read_some(boost::asio::buffer(buffer_),
                        [self](boost::system::error_code ec, size_t n) {
                          if (n > 0) self->on_read(self->buffer_.data(), n);
                          if (!ec) {
                            self->read_more();
                            return;
                          }
                          self->partial_quiet_.cancel();
                          self->lines_.clear();
                          self->splitter_.finish(self->lines_);
                          self->console_->write(self->lines_.data(), self->lines_.size());
                          if (self->duplicate_file_) {
                            self->duplicate_lines_.clear();
                            self->duplicate_splitter_.finish(self->duplicate_lines_);
                            self->write_duplicate();
                          }
                          boost::system::error_code ignored;
                          self->pipe_.close(ignored);
                          if (self->on_closed_) self->on_closed_();
                        });
}

}  // namespace trainrun::launch
