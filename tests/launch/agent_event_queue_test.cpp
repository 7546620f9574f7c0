#include "agent/agent_event_queue.hpp"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

using namespace trainrun::launch;

namespace {

std::string name(const AgentEvent& e) {
  if (const auto* s = std::get_if<event::Signal>(&e)) return "signal " + std::to_string(s->sig);
  if (std::holds_alternative<event::GraceExpired>(e)) return "grace";
  return "ended";
}

}  // namespace

TEST_CASE("an event raised while another is handled waits for it, in the order raised", "[agent]") {
  AgentEventQueue queue;
  std::vector<std::string> seen;
  std::function<void(const AgentEvent&)> handle = [&](const AgentEvent& e) {
    seen.push_back("begin " + name(e));
    // As carrying out an action may raise the next events at once.
    if (std::holds_alternative<event::Signal>(e)) {
      queue.raise(event::GraceExpired{}, handle);
      queue.raise(event::AttemptEnded{}, handle);
    }
    seen.push_back("end " + name(e));
  };
  queue.raise(event::Signal{15}, handle);
  CHECK(seen == std::vector<std::string>{"begin signal 15", "end signal 15", "begin grace",
                                         "end grace", "begin ended", "end ended"});

  // Nothing is left pending: the next event is handled at once.
  seen.clear();
  queue.raise(event::GraceExpired{}, handle);
  CHECK(seen == std::vector<std::string>{"begin grace", "end grace"});
}

TEST_CASE("a handler that throws leaves the queue empty and ready for the next event", "[agent]") {
  AgentEventQueue queue;
  std::vector<std::string> seen;
  std::function<void(const AgentEvent&)> handle = [&](const AgentEvent& e) {
    seen.push_back(name(e));
    if (std::holds_alternative<event::Signal>(e)) {
      queue.raise(event::GraceExpired{}, handle);
      throw std::runtime_error("carrying out failed");
    }
  };
  CHECK_THROWS_AS(queue.raise(event::Signal{2}, handle), std::runtime_error);
  CHECK(seen == std::vector<std::string>{"signal 2"});
  queue.raise(event::AttemptEnded{}, handle);
  CHECK(seen == std::vector<std::string>{"signal 2", "ended"});
}
