#include "keep_alive.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <memory>

#include "socket_harness.hpp"

using namespace trainrun::rendezvous;
using namespace trainrun::rendezvous::test;
using namespace std::chrono_literals;

TEST_CASE("keep-alive: a server's zero intervals are floored", "[keep_alive]") {
  LivenessOptions zeros;
  zeros.keep_alive_interval = Clock::duration::zero();
  zeros.heartbeat_timeout = Clock::duration::zero();
  const LivenessOptions l = KeepAlive::floored(zeros);
  CHECK(l.keep_alive_interval == 10ms);
  CHECK(l.heartbeat_timeout == 20ms);
  LivenessOptions usual;
  CHECK(KeepAlive::floored(usual).keep_alive_interval == usual.keep_alive_interval);
  CHECK(KeepAlive::floored(usual).heartbeat_timeout == usual.heartbeat_timeout);
}

TEST_CASE("keep-alive: beats while the server is heard, silent once it is not", "[keep_alive]") {
  boost::asio::io_context io;
  auto keep_alive = std::make_shared<KeepAlive>(io);
  LivenessOptions l;
  l.keep_alive_interval = 10ms;
  l.heartbeat_timeout = 1s;
  int beats = 0;
  int silent = 0;
  keep_alive->start(
      l,
      [&] {
        ++beats;
        // The server answers the first five beats, then goes quiet.
        if (beats <= 5) keep_alive->heard();
      },
      [&] { ++silent; });
  REQUIRE(run_until(io, [&] { return silent > 0; }));
  CHECK(beats >= 5);
  // Silent once; nothing afterwards.
  const int beats_then = beats;
  run_until(
      io, [] { return false; }, 100ms);
  CHECK(silent == 1);
  CHECK(beats == beats_then);
}
