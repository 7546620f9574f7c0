// The agent's side of a worker's diagnosis channel, against peers that misbehave.
#include "rollcall/worker_diagnosis.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
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

// The request's id, as the worker reads it: its line.
std::string read_request(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

void write_all(int fd, const std::string& text) {
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

// Answers one request with `body` after its id, as the worker's thread does; `before` first.
std::thread answering(int fd, std::string body, std::string before = "") {
  return std::thread([fd, body, before] {
    const std::string id = read_request(fd);
    write_all(fd, before + id + " " + body + "\n");
  });
}

}  // namespace

TEST_CASE("a worker's answer is read whole", "[diagnosis]") {
  Channel c;
  auto worker = answering(c.fds[1], R"({"threads": [], "flight_recorder": null})");
  const Diagnosis d = ask_diagnosis(c.fds[0], 5s);
  worker.join();
  CHECK(d.error.empty());
  CHECK(d.reply["threads"].is_array());
}

TEST_CASE("a worker that does not answer in time is given up on, its late answer skipped",
          "[diagnosis]") {
  Channel c;  // nobody reads the worker's end yet
  const auto start = std::chrono::steady_clock::now();
  const Diagnosis d = ask_diagnosis(c.fds[0], 300ms);
  CHECK(d.error == "no answer in time");
  CHECK(d.reply.is_null());
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // The first request answered late, in two pieces, before the second is: the second gets its
  // own answer.
  const std::string first = read_request(c.fds[1]);
  write_all(c.fds[1], first + R"( {"late": )");
  auto worker = answering(c.fds[1], R"({"next": true})", "true}\n");
  const Diagnosis again = ask_diagnosis(c.fds[0], 5s);
  worker.join();
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
    auto worker = answering(c.fds[1], "[" + std::string(4096, '1') + "]");
    const Diagnosis d = ask_diagnosis(c.fds[0], 1s, 1024);
    worker.join();
    CHECK(d.error == "its answer is larger than the 1024 bytes read");
    // What is left of it is skipped by the next request.
    auto next = answering(c.fds[1], R"({"next": true})");
    const Diagnosis again = ask_diagnosis(c.fds[0], 5s, 1024);
    next.join();
    CHECK(again.error.empty());
  }
  {
    Channel c;
    auto worker = answering(c.fds[1], "[1, 2");
    const Diagnosis d = ask_diagnosis(c.fds[0], 1s);
    worker.join();
    CHECK(d.error == "its answer is not a JSON object");
  }
  {
    Channel c;  // an answer that never ends
    auto worker = std::thread([fd = c.fds[1]] {
      const std::string id = read_request(fd);
      write_all(fd, id + " {\"threads\": ");
    });
    const Diagnosis d = ask_diagnosis(c.fds[0], 300ms);
    worker.join();
    CHECK(d.error == "no answer in time");
  }
}
