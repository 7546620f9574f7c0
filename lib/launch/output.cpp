#include "output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

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
  std::string line = "trainrun: cannot write " + name + ": " + std::strerror(error) +
                     "; the rest of this stream goes to the console only\n";
  write_all(2, line.data(), line.size());
}

}  // namespace

OutputPlan plan_output(const LaunchConfig& config, int local_rank, const std::string& rank_dir) {
  const int redirect = static_cast<int>(config.redirects.for_rank(local_rank));
  const int tee = static_cast<int>(config.tee.for_rank(local_rank));
  bool console_allowed = true;
  if (config.local_ranks_filter) {
    const auto& f = *config.local_ranks_filter;
    console_allowed = std::find(f.begin(), f.end(), local_rank) != f.end();
  }
  auto decide = [&](int bit, const char* name) {
    StreamPlan p;
    const bool to_file = (redirect & bit) || (tee & bit) || !console_allowed;
    if (!to_file) return p;
    p.file = rank_dir + "/" + name;
    p.route = ((tee & bit) && console_allowed) ? StreamRoute::tee : StreamRoute::file;
    return p;
  };
  return {decide(1, "stdout.log"), decide(2, "stderr.log")};
}

std::string line_prefix(const std::optional<std::string>& templ, const std::string& role, int rank,
                        int local_rank) {
  if (!templ) return "[" + role + std::to_string(local_rank) + "]:";
  const std::pair<const char*, std::string> names[] = {
      {"role_name", role}, {"rank", std::to_string(rank)}, {"local_rank", std::to_string(local_rank)}};
  const std::string& t = *templ;
  std::string out;
  for (size_t i = 0; i < t.size();) {
    if (t[i] != '$') {
      out += t[i++];
      continue;
    }
    if (t.compare(i, 2, "$$") == 0) {
      out += '$';
      i += 2;
      continue;
    }
    bool matched = false;
    for (const auto& [name, value] : names) {
      const std::string braced = std::string("${") + name + "}";
      const std::string bare = std::string("$") + name;
      if (t.compare(i, braced.size(), braced) == 0) {
        out += value;
        i += braced.size();
        matched = true;
        break;
      }
      // A bare $name ends where an identifier ends ($rank must not eat $rank_x).
      if (t.compare(i, bare.size(), bare) == 0) {
        size_t end = i + bare.size();
        if (end < t.size() && (std::isalnum(static_cast<unsigned char>(t[end])) || t[end] == '_'))
          continue;
        out += value;
        i = end;
        matched = true;
        break;
      }
    }
    if (!matched) out += t[i++];
  }
  return out;
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return false;
    }
  }
  return true;
}

Console::Console(boost::asio::io_context& io, int fd)
    : io_(io), fd_(fd), nonblocking_(io), last_progress_(std::chrono::steady_clock::now()) {
  // Setting O_NONBLOCK on fd_ itself would change the file description the shell and other
  // processes share; opening the pipe or terminal again through /proc gives one of our own. A
  // terminal is treated as a pipe: it blocks too when output is stopped (^S) or its reader lags.
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !(S_ISFIFO(st.st_mode) || ::isatty(fd_))) return;
  const std::string link = "/proc/self/fd/" + std::to_string(fd_);
  const int nb = ::open(link.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (nb < 0) return;
  boost::system::error_code ec;
  nonblocking_.assign(nb, ec);
  if (ec) ::close(nb);
}

Console::~Console() = default;

bool Console::same_file(int a, int b) {
  struct stat sa{}, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void Console::write(const char* data, size_t size) {
  if (closed_ || size == 0) return;
  if (!nonblocking_.is_open()) {
    if (!write_all(fd_, data, size)) {
      close();
      return;
    }
    at_line_start_ = data[size - 1] == '\n';
    last_progress_ = std::chrono::steady_clock::now();
    return;
  }
  // Behind what is queued, or the order of lines would change.
  if (queued() == 0) {
    const size_t n = write_some(data, size);
    if (closed_ || n == size) return;
    data += n;
    size -= n;
  }
  queue_.append(data, size);
  arm();
}

size_t Console::write_some(const char* data, size_t size) {
  size_t done = 0;
  bool failed = false;
  while (done < size) {
    const ssize_t n = ::write(nonblocking_.native_handle(), data + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      failed = true;  // EPIPE: the reader has gone
      break;
    }
  }
  if (done > 0) {
    at_line_start_ = data[done - 1] == '\n';
    last_progress_ = std::chrono::steady_clock::now();
  }
  if (failed) close();  // after the last use of `data`, which may point into queue_
  return done;
}

void Console::arm() {
  if (waiting_ || closed_) return;
  waiting_ = true;
  nonblocking_.async_wait(boost::asio::posix::stream_descriptor::wait_write,
                          [this](boost::system::error_code ec) {
                            if (ec == boost::asio::error::operation_aborted) return;
                            waiting_ = false;
                            on_writable();
                          });
}

void Console::on_writable() {
  const size_t n = write_some(queue_.data() + head_, queued());
  if (closed_) return;
  head_ += n;
  if (head_ == queue_.size()) {
    // A long pause leaves a big buffer behind; do not keep it for the rest of the job.
    if (queue_.capacity() > (1u << 20)) std::string().swap(queue_);
    queue_.clear();
    head_ = 0;
  } else if (head_ >= queue_.size() / 2) {
    queue_.erase(0, head_);
    head_ = 0;
  }
  if (queued() <= kQueueLimit / 2) notify(not_full_waiters_);
  if (queued() == 0) {
    notify(flushed_waiters_);
    return;
  }
  arm();
}

void Console::close() {
  closed_ = true;
  std::string().swap(queue_);
  head_ = 0;
  if (waiting_) {
    boost::system::error_code ignored;
    nonblocking_.cancel(ignored);
    waiting_ = false;
  }
  notify(not_full_waiters_);
  notify(flushed_waiters_);
}

void Console::notify(std::vector<std::function<void()>>& waiters) {
  std::vector<std::function<void()>> now;
  now.swap(waiters);
  for (auto& f : now) boost::asio::post(io_, std::move(f));
}

void Console::when_not_full(std::function<void()> f) {
  if (closed_ || queued() <= kQueueLimit / 2)
    boost::asio::post(io_, std::move(f));
  else
    not_full_waiters_.push_back(std::move(f));
}

void Console::when_flushed(std::function<void()> f) {
  if (closed_ || queued() == 0)
    boost::asio::post(io_, std::move(f));
  else
    flushed_waiters_.push_back(std::move(f));
}

size_t Console::abandon() {
  const size_t dropped = queued();
  if (!closed_) close();
  return dropped;
}

void Console::write_now(const std::string& text) {
  const std::string line = at_line_start_ ? text : "\n" + text;
  if (!nonblocking_.is_open()) {
    write_all(fd_, line.data(), line.size());
    return;
  }
  ssize_t n;
  do {
    n = ::write(nonblocking_.native_handle(), line.data(), line.size());
  } while (n < 0 && errno == EINTR);
}

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
    : pipe_(io, pipe_fd), file_fd_(file_fd), console_(console), splitter_(std::move(prefix)),
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
  pipe_.async_read_some(boost::asio::buffer(buffer_), [self](boost::system::error_code ec,
                                                             size_t n) {
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
