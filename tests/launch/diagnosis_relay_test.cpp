// The agent's end of a worker's diagnosis channel: the notices taken on the loop, the asker's
// requests and answers passed through, against peers on real sockets.
#include "workers/diagnosis_relay.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "rollcall/worker_diagnosis.hpp"
#include "trainrun/launch/workers/diagnosis.hpp"

using namespace trainrun::launch;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

void write_all(int fd, const std::string& text) {
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

// A relay on a loop of its own thread, the worker's end of its channel in `worker`; the notices
// it took in `notices`, read once the loop is stopped.
struct Relayed {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  int worker = -1;
  std::shared_ptr<DiagnosisRelay> relay;
  std::promise<std::string> first_notice;
  std::vector<std::string> notices;
  std::thread loop;

  Relayed() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    worker = fds[1];
    relay = DiagnosisRelay::open(io, fds[0], [this](const std::string& text) {
      notices.push_back(text);
      if (notices.size() == 1) first_notice.set_value(text);
    });
    REQUIRE(relay);
    loop = std::thread([this] { io.run(); });
  }
  ~Relayed() {
    work.reset();
    io.stop();
    loop.join();
    relay->close();
    if (worker >= 0) ::close(worker);
  }
};

}  // namespace

TEST_CASE("a notice is taken on the loop; an answer around it reaches the asker", "[diagnosis]") {
  Relayed r;
  auto worker = std::thread([&] {
    const std::string id = read_line(r.worker);
    // The notice written before the answer and in the middle of nothing else: as the worker's
    // main thread and its diagnosis thread take turns.
    write_all(r.worker, "0 {\"returned\": \"exit\", \"code\": 3}\n");
    write_all(r.worker, id + " {\"threads\": []}\n");
  });
  const Diagnosis d = ask_diagnosis(r.relay->asker(), 10s);
  worker.join();
  CHECK(d.error.empty());
  CHECK(d.reply["threads"].is_array());
  auto notice = r.first_notice.get_future();
  REQUIRE(notice.wait_for(10s) == std::future_status::ready);
  const auto script = parse_script_return(notice.get());
  REQUIRE(script);
  CHECK(script->how == "exit");
  CHECK(script->code == 3);
}

TEST_CASE("a notice split across writes, and lines that only look like one", "[diagnosis]") {
  Relayed r;
  write_all(r.worker, "0");
  write_all(r.worker, "\n0x 1\n10 {}\n");  // not notices: passed on to the asker
  write_all(r.worker, "0 {\"returned\": ");
  write_all(r.worker, "\"returned\", \"code\": 0}\n");
  auto notice = r.first_notice.get_future();
  REQUIRE(notice.wait_for(10s) == std::future_status::ready);
  CHECK(notice.get() == "{\"returned\": \"returned\", \"code\": 0}");
  CHECK(read_line(r.relay->asker()) == "0");
  CHECK(read_line(r.relay->asker()) == "0x 1");
  CHECK(read_line(r.relay->asker()) == "10 {}");
}

TEST_CASE("a worker that closed its channel is seen so by the asker", "[diagnosis]") {
  Relayed r;
  ::close(r.worker);
  r.worker = -1;
  const Diagnosis d = ask_diagnosis(r.relay->asker(), 10s);
  CHECK(d.error == "the worker closed its channel");
}

TEST_CASE("a notice's text that is not one is refused", "[diagnosis]") {
  CHECK_FALSE(parse_script_return("not json"));
  CHECK_FALSE(parse_script_return(R"({"returned": "returned"})"));
  CHECK_FALSE(parse_script_return(R"({"returned": "sideways", "code": 0})"));
  CHECK_FALSE(parse_script_return(R"({"returned": "exit", "code": 256})"));
  CHECK(parse_script_return(R"({"returned": "exception", "code": 1})")->code == 1);
}

TEST_CASE("a notice written before the worker ended is taken before its end is handled",
          "[diagnosis]") {
  // The loop has not run: its wait would take the notice later than the worker's reaping.
  asio::io_context io;
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  std::vector<std::string> notices;
  auto relay = DiagnosisRelay::open(
      io, fds[0], [&notices](const std::string& text) { notices.push_back(text); });
  write_all(fds[1], "0 {\"returned\": \"returned\", \"code\": 0}\n");
  ::close(fds[1]);
  CHECK_FALSE(relay->drain());  // the channel ended
  REQUIRE(notices.size() == 1);
  CHECK(parse_script_return(notices[0])->how == "returned");
  relay->close();
}
