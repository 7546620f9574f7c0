#include "template_socket.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace trainrun::launch {

namespace {

// The largest message the template sends (a line, a pid, an errno).
constexpr std::uint32_t kMaxMessage = 64 * 1024;
constexpr std::size_t kHeader = 5;  // the tag and the size

std::uint32_t size_of(const std::string& header) {
  const auto byte = [&](std::size_t i) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(header[i]));
  };
  return byte(1) | byte(2) << 8 | byte(3) << 16 | byte(4) << 24;
}

}  // namespace

TemplateSocket::TemplateSocket(boost::asio::io_context& io, int fd)
    : fd_(fd), watch_(io, fd), timer_(io) {}

TemplateSocket::~TemplateSocket() {
  then_ = nullptr;
  alive_.reset();
  timer_.cancel();
  // The descriptor is closed here, after the watch lets go of it.
  (void)watch_.release();
  ::close(fd_);
}

bool TemplateSocket::send(const std::string& data, const std::vector<int>& fds) {
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  iovec iov{const_cast<char*>(data.data()), 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  ssize_t sent;
  do {
    sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != 1) return false;
  for (std::size_t at = 1; at < data.size();) {
    const ssize_t n = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

void TemplateSocket::next(Then then, std::optional<std::chrono::milliseconds> limit) {
  then_ = std::move(then);
  got_.clear();
  timer_.cancel();
  ++serial_;
  if (limit) {
    timer_.expires_after(*limit);
    timer_.async_wait(
        [this, alive = std::weak_ptr<int>(alive_), serial = serial_](boost::system::error_code ec) {
          if (!ec && alive.lock() && serial == serial_ && then_) finish(std::nullopt);
        });
  }
  wait();
}

void TemplateSocket::wait() {
  watch_.async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [this, alive = std::weak_ptr<int>(alive_), serial = serial_](boost::system::error_code ec) {
        if (!ec && alive.lock() && serial == serial_ && then_) readable();
      });
}

void TemplateSocket::readable() {
  // What the message still lacks, and no more: the template's next message is the next one's.
  while (true) {
    const std::size_t want = got_.size() < kHeader ? kHeader : kHeader + size_of(got_);
    if (got_.size() == want) break;
    char chunk[4096];
    const std::size_t ask = std::min(sizeof chunk, want - got_.size());
    const ssize_t n = ::recv(fd_, chunk, ask, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return wait();
    if (n <= 0) return finish(std::nullopt);  // closed: the template ended
    got_.append(chunk, static_cast<std::size_t>(n));
    if (got_.size() == kHeader && size_of(got_) > kMaxMessage) return finish(std::nullopt);
  }
  finish(Message{got_[0], got_.substr(kHeader)});
}

void TemplateSocket::finish(std::optional<Message> message) {
  timer_.cancel();
  got_.clear();
  if (auto then = std::exchange(then_, nullptr)) then(std::move(message));
}

bool TemplateSocket::stirred() const {
  char byte;
  return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

}  // namespace trainrun::launch
