// The agent's side of a worker's diagnosis channel, against peers that misbehave.
#include "trainrun/launch/rollcall/worker_diagnosis.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

using namespace trainrun::launch;
using namespace std::chrono_literals;

namespace {

// A socket pair: [0] the agent's end, [1] the worker's, closed with this object.
struct Channel {
  int fds[2] = {-1, -1};
  Channel() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0); }
  ~Channel() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void close_worker() { ::close(fds[1]), fds[1] = -1; }
};

std::string framed(const std::string& body, std::uint32_t size) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  return out + body;
}

// Answers one request with `answer`, as the worker's thread does.
std::thread answering(int fd, std::string answer) {
  return std::thread([fd, answer] {
    char request;
    if (::read(fd, &request, 1) == 1) {
      ssize_t ignored = ::write(fd, answer.data(), answer.size());
      (void)ignored;
    }
  });
}

}  // namespace

TEST_CASE("a worker's answer is read whole", "[diagnosis]") {
  Channel c;
  const std::string body = R"({"threads": [], "flight_recorder": null})";
  auto worker = answering(c.fds[1], framed(body, body.size()));
  const Diagnosis d = ask_diagnosis(c.fds[0], 5s);
  worker.join();
  CHECK(d.error.empty());
  CHECK(d.reply["threads"].is_array());
}

TEST_CASE("a worker that does not answer in time is given up on", "[diagnosis]") {
  Channel c;  // nobody reads the worker's end
  const auto start = std::chrono::steady_clock::now();
  const Diagnosis d = ask_diagnosis(c.fds[0], 300ms);
  CHECK(d.error == "no answer in time");
  CHECK(d.reply.is_null());
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // Its late answer is not taken for the next one's.
  const std::string late = R"({"late": true})";
  const std::string next = R"({"next": true})";
  // The first request, answered late.
  char request;
  REQUIRE(::read(c.fds[1], &request, 1) == 1);
  const std::string late_answer = framed(late, late.size());
  REQUIRE(::write(c.fds[1], late_answer.data(), late_answer.size()) ==
          static_cast<ssize_t>(late_answer.size()));
  auto second = answering(c.fds[1], framed(next, next.size()));
  const Diagnosis again = ask_diagnosis(c.fds[0], 5s);
  second.join();
  CHECK(again.error.empty());
  CHECK(again.reply.contains("next"));
}

TEST_CASE("a worker that closed its channel, or answers too much or not JSON, is said so",
          "[diagnosis]") {
  {
    Channel c;
    c.close_worker();
    const Diagnosis d = ask_diagnosis(c.fds[0], 1s);
    CHECK_FALSE(d.error.empty());
    CHECK(d.reply.is_null());
  }
  {
    Channel c;
    auto worker = answering(c.fds[1], framed("", 1u << 30));
    const Diagnosis d = ask_diagnosis(c.fds[0], 1s, 1024);
    worker.join();
    CHECK(d.error == "its answer (1073741824 bytes) is larger than the 1024 read");
  }
  {
    Channel c;
    auto worker = answering(c.fds[1], framed("[1, 2", 5));
    const Diagnosis d = ask_diagnosis(c.fds[0], 1s);
    worker.join();
    CHECK(d.error == "its answer is not a JSON object");
  }
  {
    Channel c;  // a header that never ends
    auto worker = std::thread([fd = c.fds[1]] {
      char request;
      REQUIRE(::read(fd, &request, 1) == 1);
      ssize_t ignored = ::write(fd, "\x05\x00", 2);
      (void)ignored;
    });
    const Diagnosis d = ask_diagnosis(c.fds[0], 300ms);
    worker.join();
    CHECK(d.error == "no answer in time");
  }
}
