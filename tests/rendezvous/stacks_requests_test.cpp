// A client's open asks for the other nodes' stacks: each answered once, however it ends.
#include "stacks_requests.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>

using namespace trainrun::rendezvous;
using namespace std::chrono_literals;

namespace {

struct Answer {
  int calls = 0;
  std::vector<std::string> answers;
  std::vector<StacksMissing> missing;
  std::string error;
};

StacksDone into(Answer& a) {
  return [&a](std::vector<std::string> answers, std::vector<StacksMissing> missing,
              std::string error) {
    ++a.calls;
    a.answers = std::move(answers);
    a.missing = std::move(missing);
    a.error = std::move(error);
  };
}

}  // namespace

TEST_CASE("stacks requests: the host's end gives the answers kept, once", "[client]") {
  boost::asio::io_context io;
  StacksRequests requests(io);
  Answer first, second;
  const std::uint64_t a = requests.open(into(first), 60s);
  const std::uint64_t b = requests.open(into(second), 60s);
  CHECK(a != b);
  requests.answer(StacksAnswer{a, "{\"node\": 1}"});
  requests.answer(StacksAnswer{99, "{\"node\": 9}"});  // no such request: dropped
  requests.finish(a, {StacksMissing{"host-2", "no answer"}}, "");
  requests.finish(a, {}, "again");  // ended already: nothing
  CHECK(first.calls == 1);
  CHECK(first.answers == std::vector<std::string>{"{\"node\": 1}"});
  REQUIRE(first.missing.size() == 1);
  CHECK(first.missing[0].host == "host-2");
  CHECK(second.calls == 0);
  // The connection ends: the one still open is answered, on the io_context, not from within.
  requests.abandon();
  CHECK(second.calls == 0);
  io.run();
  CHECK(second.calls == 1);
  CHECK(second.error == "the connection to the rendezvous host ended before the answers");
}

TEST_CASE("stacks requests: a host that never ends a request is given up on", "[client]") {
  boost::asio::io_context io;
  StacksRequests requests(io);
  Answer answer;
  requests.open(into(answer), 10ms);
  io.run_for(5s);
  CHECK(answer.calls == 1);
  CHECK(answer.error == "the rendezvous host did not end the request in time");
}
