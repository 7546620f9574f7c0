// The events of a worker forked by the --preload template's child that come before the reply
// naming its pid (workers/early_events.hpp), and the agent's end of the template's socket, read
// as events on the loop (workers/template_socket.hpp).
#include "workers/early_events.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "workers/template_socket.hpp"

using namespace trainrun;
using namespace trainrun::launch;

namespace {

WaitEvent ended(int code) {
  WaitEvent e;
  e.kind = WaitEvent::Kind::ended;
  e.end.code = code;
  return e;
}

WaitEvent stopped(int sig) {
  WaitEvent e;
  e.kind = WaitEvent::Kind::stopped;
  e.stop_signal = sig;
  return e;
}

WaitEvent continued() {
  WaitEvent e;
  e.kind = WaitEvent::Kind::continued;
  return e;
}

std::string message(char tag, const std::string& text) {
  std::string out(1, tag);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text;
}

void write_all(int fd, const std::string& data) {
  REQUIRE(::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
}

}  // namespace

TEST_CASE("a worker's exit that comes before the reply naming it is held until the reply",
          "[preload]") {
  EarlyEvents early;
  early.expect();
  REQUIRE(early.hold(4242, ended(3)));
  const auto given = early.replied(4242);
  REQUIRE(given.size() == 1);
  CHECK(given[0].kind == WaitEvent::Kind::ended);
  CHECK(given[0].end.code == 3);
  CHECK_FALSE(early.expecting());
}

TEST_CASE("a worker's events before the reply are given in the order they came", "[preload]") {
  EarlyEvents early;
  early.expect();
  REQUIRE(early.hold(7, stopped(19)));
  REQUIRE(early.hold(7, continued()));
  REQUIRE(early.hold(7, ended(0)));
  const auto given = early.replied(7);
  REQUIRE(given.size() == 3);
  CHECK(given[0].kind == WaitEvent::Kind::stopped);
  CHECK(given[0].stop_signal == 19);
  CHECK(given[1].kind == WaitEvent::Kind::continued);
  CHECK(given[2].kind == WaitEvent::Kind::ended);
}

TEST_CASE("another orphan's events are not the worker's, and go with the reply", "[preload]") {
  EarlyEvents early;
  early.expect();
  REQUIRE(early.hold(100, ended(1)));  // what an earlier worker left behind
  REQUIRE(early.hold(200, ended(2)));
  const auto given = early.replied(200);
  REQUIRE(given.size() == 1);
  CHECK(given[0].end.code == 2);
  // The next request finds nothing of the last one's.
  early.expect();
  CHECK(early.replied(100).empty());
}

TEST_CASE("nothing is held while no fork request is out", "[preload]") {
  EarlyEvents early;
  CHECK_FALSE(early.hold(5, ended(0)));
  early.expect();
  CHECK(early.replied(-1).empty());  // the fork failed: no pid
  CHECK_FALSE(early.hold(5, ended(0)));
  early.expect();
  REQUIRE(early.hold(6, ended(0)));
  early.clear();  // the template ended: no reply will come
  CHECK_FALSE(early.expecting());
  CHECK_FALSE(early.hold(6, ended(0)));
}

TEST_CASE("the template's message is read as its bytes come, the loop going on meanwhile",
          "[preload]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  boost::asio::io_context io;
  TemplateSocket socket(io, fds[0]);
  std::vector<std::string> order;
  std::optional<TemplateSocket::Message> got;
  socket.next([&](std::optional<TemplateSocket::Message> m) {
    order.push_back("message");
    got = std::move(m);
  });
  const std::string whole = message('P', "12345");
  write_all(fds[1], whole.substr(0, 3));  // part of the header
  boost::asio::steady_timer later(io), meanwhile(io);
  meanwhile.expires_after(std::chrono::milliseconds(50));
  meanwhile.async_wait([&](boost::system::error_code) { order.push_back("meanwhile"); });
  later.expires_after(std::chrono::milliseconds(300));
  later.async_wait([&](boost::system::error_code) {
    order.push_back("rest");
    write_all(fds[1], whole.substr(3));
  });
  io.run_for(std::chrono::seconds(10));
  // A loop that waited for the whole message would have run nothing before it.
  CHECK(order == std::vector<std::string>{"meanwhile", "rest", "message"});
  REQUIRE(got);
  CHECK(got->first == 'P');
  CHECK(got->second == "12345");
  ::close(fds[1]);
}

TEST_CASE("one message is read, not the next one's bytes", "[preload]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  boost::asio::io_context io;
  TemplateSocket socket(io, fds[0]);
  write_all(fds[1], message('R', "") + message('P', "77"));
  std::vector<TemplateSocket::Message> got;
  std::function<void(std::optional<TemplateSocket::Message>)> read =
      [&](std::optional<TemplateSocket::Message> m) {
        REQUIRE(m);
        got.push_back(*m);
        if (got.size() == 1) socket.next(read);
      };
  socket.next(read);
  io.run_for(std::chrono::seconds(10));
  REQUIRE(got.size() == 2);
  CHECK(got[0] == TemplateSocket::Message{'R', ""});
  CHECK(got[1] == TemplateSocket::Message{'P', "77"});
  ::close(fds[1]);
}

TEST_CASE("a template that closes its end, mid-message or before, gives no message", "[preload]") {
  for (const std::string& sent : {std::string(), message('P', "123").substr(0, 6)}) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    boost::asio::io_context io;
    TemplateSocket socket(io, fds[0]);
    if (!sent.empty()) write_all(fds[1], sent);
    ::close(fds[1]);
    bool told = false;
    socket.next([&](std::optional<TemplateSocket::Message> m) {
      told = true;
      CHECK_FALSE(m);
    });
    io.run_for(std::chrono::seconds(10));
    CHECK(told);
  }
}

TEST_CASE("a template silent past the limit, or whose message is too large, gives none",
          "[preload]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  boost::asio::io_context io;
  TemplateSocket socket(io, fds[0]);
  int told = 0;
  socket.next(
      [&](std::optional<TemplateSocket::Message> m) {
        ++told;
        CHECK_FALSE(m);
        io.stop();  // the socket's read stays armed: the loop would run the bound out
      },
      std::chrono::milliseconds(100));
  io.run_for(std::chrono::seconds(10));
  CHECK(told == 1);
  std::string huge(1, 'P');
  huge += std::string("\xff\xff\xff\x7f", 4);
  write_all(fds[1], huge);
  socket.next([&](std::optional<TemplateSocket::Message> m) {
    ++told;
    CHECK_FALSE(m);
  });
  io.restart();
  io.run_for(std::chrono::seconds(10));
  CHECK(told == 2);
  ::close(fds[1]);
}

TEST_CASE("a reply that comes after its socket is gone is never handed on", "[preload]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  boost::asio::io_context io;
  bool told = false;
  {
    TemplateSocket socket(io, fds[0]);
    socket.next([&](std::optional<TemplateSocket::Message>) { told = true; });
    write_all(fds[1], message('P', "1"));
  }
  io.run_for(std::chrono::milliseconds(200));
  CHECK_FALSE(told);
  ::close(fds[1]);
}
