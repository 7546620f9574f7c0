#include "output.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

Console::~Console() {
  if (nonblocking_fd_ >= 0) ::close(nonblocking_fd_);
}

// Setting O_NONBLOCK on fd_ itself would change the file description the shell and other
// processes share; opening the pipe again through /proc gives one of our own.
void Console::open_nonblocking() {
  probed_ = true;
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !S_ISFIFO(st.st_mode)) return;
  const std::string link = "/proc/self/fd/" + std::to_string(fd_);
  nonblocking_fd_ = ::open(link.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
}

void Console::write(const char* data, size_t size) {
  if (closed_ || size == 0) return;
  if (!probed_) open_nonblocking();
  if (nonblocking_fd_ < 0) {
    if (!write_all(fd_, data, size)) closed_ = true;
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kStallSeconds);
  while (size > 0) {
    ssize_t n = ::write(nonblocking_fd_, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kStallSeconds);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      closed_ = true;  // EPIPE: the reader has gone
      return;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{nonblocking_fd_, POLLOUT, 0};
    if (left.count() <= 0 || (::poll(&p, 1, static_cast<int>(left.count())) == 0 &&
                              std::chrono::steady_clock::now() >= deadline)) {
      closed_ = true;
      const std::string line = fmt::format(
          "trainrun: the console has taken no output for {} s; workers' console output is "
          "dropped from now on (log files keep all of it)\n",
          kStallSeconds);
      write_all(2, line.data(), line.size());
      return;
    }
  }
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

void TeeReader::read_more() {
  auto self = shared_from_this();
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
