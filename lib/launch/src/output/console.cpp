#include "trainrun/launch/output/console.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>

#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

Console::Console(boost::asio::io_context& io, int fd)
    : io_(io), fd_(fd), nonblocking_(io), last_progress_(std::chrono::steady_clock::now()) {
  // Setting O_NONBLOCK on fd_ itself would change the file description the shell and other
  // processes share; opening the pipe or terminal again through /proc gives one of our own. A
  // terminal is treated as a pipe: it blocks too when output is stopped (^S) or its reader lags.
  struct stat st {};
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
  struct stat sa {
  }, sb{};
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

}  // namespace trainrun::launch
