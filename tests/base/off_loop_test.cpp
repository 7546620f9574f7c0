// Work taken off an event loop (lib/base/off_loop.hpp), with a real io_context and thread.
#include "trainrun/base/off_loop.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

using namespace trainrun;
namespace asio = boost::asio;

namespace {

OffLoop::Post post_to(asio::io_context& io) {
  return [&io](std::function<void()> f) { asio::post(io, std::move(f)); };
}

// Runs the loop until `done` or 10 s.
template <class Done>
bool run_until(asio::io_context& io, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace

TEST_CASE("work runs off the loop, its result on the loop, in order", "[base]") {
  asio::io_context io;
  OffLoop off(post_to(io));
  const auto loop_thread = std::this_thread::get_id();
  std::vector<int> results;
  std::vector<std::thread::id> workers, handlers;
  for (int i = 0; i < 3; ++i)
    off.run(
        [i, &workers] {
          workers.push_back(std::this_thread::get_id());
          return i * 10;
        },
        [&](int r) {
          handlers.push_back(std::this_thread::get_id());
          results.push_back(r);
        });
  CHECK(results.empty());  // never from within run()
  REQUIRE(run_until(io, [&] { return results.size() == 3; }));
  CHECK(results == std::vector<int>{0, 10, 20});
  for (const auto& id : workers) CHECK(id != loop_thread);
  for (const auto& id : handlers) CHECK(id == loop_thread);
}

TEST_CASE("the loop goes on while a job runs", "[base]") {
  asio::io_context io;
  OffLoop off(post_to(io));
  std::atomic<bool> release{false};
  bool done = false;
  off.run(
      [&release] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return 1;
      },
      [&done](int) { done = true; });
  bool other = false;
  asio::post(io, [&other] { other = true; });
  REQUIRE(run_until(io, [&] { return other; }));
  CHECK(!done);
  release = true;
  REQUIRE(run_until(io, [&] { return done; }));
}

TEST_CASE("a result handed back after the end is dropped, and jobs not started never run",
          "[base]") {
  asio::io_context io;
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  int handled = 0;
  std::thread releaser;
  {
    OffLoop off(post_to(io));
    for (int i = 0; i < 3; ++i)
      off.run(
          [&] {
            ++started;
            while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            return 0;
          },
          [&handled](int) { ++handled; });
    while (started == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    releaser = std::thread([&release] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      release = true;
    });
  }  // waits for the running job, drops the two others
  releaser.join();
  CHECK(started == 1);
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  CHECK(handled == 0);
}
