#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "frame.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous::test {

// Runs the loop until `done` or `limit` passes; returns whether `done` became true.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Runs the loop until it runs out of work, for at most `limit`; returns how long that took.
inline std::chrono::steady_clock::duration run_out_of_work(
    boost::asio::io_context& io, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  auto t0 = std::chrono::steady_clock::now();
  io.restart();
  io.run_for(limit);
  return std::chrono::steady_clock::now() - t0;
}

// A port held by a socket that is bound but does not listen (no SO_REUSEADDR), as a process
// that has not called listen() yet, or never will, holds it: no one can host on it or connect.
struct BoundNotListening {
  boost::asio::ip::tcp::acceptor socket;
  explicit BoundNotListening(boost::asio::io_context& io) : socket(io) {
    socket.open(boost::asio::ip::tcp::v4());
    socket.bind(boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
  }
  int port() const { return socket.local_endpoint().port(); }
};

inline void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

// A hand-driven peer on a plain socket, for the hostile-client tests.
class RawPeer {
 public:
  explicit RawPeer(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~RawPeer() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  bool connected() const { return connected_; }
  bool send_bytes(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  bool send_message(const ClientMessage& m) { return send_bytes(encode_frame(encode(m))); }

  // The next frame from the server, or nothing if the connection closed or time ran out.
  std::optional<std::string> read_frame(boost::asio::io_context& io,
                                        std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::optional<std::string> frame;
    run_until(
        io,
        [&] {
          pump();
          frame = next_frame();
          return frame.has_value() || closed_;
        },
        limit);
    return frame;
  }
  std::optional<ServerMessage> read_message(boost::asio::io_context& io) {
    auto f = read_frame(io);
    if (!f) return std::nullopt;
    return decode_server_message(*f);
  }
  // The next message of type T, dropping those before it; nothing if the connection closed or
  // time ran out first.
  template <class T>
  std::optional<ServerMessage> read_until(boost::asio::io_context& io) {
    std::optional<ServerMessage> m;
    do {
      m = read_message(io);
    } while (m && !std::holds_alternative<T>(*m));
    return m;
  }
  // Whether the server closed the connection within `limit` (frames before that are dropped).
  bool wait_closed(boost::asio::io_context& io,
                   std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    return run_until(
        io,
        [&] {
          pump();
          while (next_frame()) {
          }
          return closed_;
        },
        limit);
  }
  std::string received_text() const { return all_; }

 private:
  void pump() {
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        all_.append(buf, static_cast<std::size_t>(n));
        unread_.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) closed_ = true;
      return;
    }
  }

  std::optional<std::string> next_frame() {
    std::size_t used = decoder_.feed(unread_.data(), unread_.size());
    unread_.erase(0, used);
    return decoder_.next();
  }

  int fd_ = -1;
  std::string unread_;
  bool connected_ = false;
  bool closed_ = false;
  FrameDecoder decoder_;
  std::string all_;
};

}  // namespace trainrun::rendezvous::test
