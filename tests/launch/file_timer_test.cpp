#include "agent/file_timer.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace trainrun::launch;

TEST_CASE("a file timer request is read as torch's FileTimerClient writes it") {
  std::string problem;
  const auto r = parse_timer_request(
      R"({"version": 1, "pid": 42, "scope_id": "train.py#12", "expiration_time": 1700000000.5, )"
      R"("signal": 9})",
      &problem);
  REQUIRE(r);
  CHECK(r->pid == 42);
  CHECK(r->scope_id == "train.py#12");
  CHECK(r->expiration_time == 1700000000.5);
  CHECK(r->signal == 9);
  // A release: negative expiration, no signal.
  const auto release = parse_timer_request(
      R"({"version": 1, "pid": 42, "scope_id": "s", "expiration_time": -1, "signal": 0})", nullptr);
  REQUIRE(release);
  CHECK(release->expiration_time == -1);
}

TEST_CASE("what is not a file timer request says why") {
  const std::pair<std::string, std::string> bad[] = {
      {"not json", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": "7", "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\""},
      {R"({"pid": 7, "scope_id": 3, "expiration_time": 1, "signal": 9})", "\"scope_id\""},
      {R"({"pid": 7, "scope_id": "s", "expiration_time": "soon", "signal": 9})",
       "\"expiration_time\""},
      {R"({"pid": 7, "scope_id": "s", "expiration_time": 1, "signal": 1000})", "\"signal\""},
      {std::string(kMaxTimerRequest + 1, ' '), "longer than 4096 bytes"},
  };
  for (const auto& [line, why] : bad) {
    std::string problem;
    CHECK_FALSE(parse_timer_request(line, &problem));
    CHECK_THAT(problem, Catch::Contains(why));
  }
}

TEST_CASE("file timers expire per pid, earliest scope with a signal first") {
  FileTimers timers;
  CHECK_FALSE(timers.next_expiration());
  timers.apply({10, "a", 105, 0});
  timers.apply({10, "b", 103, 15});
  timers.apply({10, "c", 200, 9});
  timers.apply({11, "a", 150, 9});
  CHECK(*timers.next_expiration() == 103);
  CHECK(timers.expire(102).empty());
  const auto expired = timers.expire(110);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 10);
  REQUIRE(expired[0].scopes.size() == 2);
  CHECK(expired[0].scopes[0].scope_id == "b");
  REQUIRE(expired[0].reaping);
  CHECK(expired[0].reaping->signal == 15);
  // Every timer of that pid goes with it ("c" too); the other pid's stays.
  CHECK(*timers.next_expiration() == 150);
  timers.apply({11, "a", -1, 0});  // released
  CHECK(timers.empty());
}

TEST_CASE("a scope re-armed replaces its timer; one without a signal is not reaped") {
  FileTimers timers;
  timers.apply({10, "a", 100, 9});
  timers.apply({10, "a", 300, 0});
  CHECK(timers.expire(200).empty());
  const auto expired = timers.expire(300);
  REQUIRE(expired.size() == 1);
  CHECK_FALSE(expired[0].reaping);
}

TEST_CASE("the file timer's FIFO is torchrun's") {
  CHECK_FALSE(file_timer_path({}));
  CHECK_FALSE(file_timer_path({{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}}));
  CHECK(*file_timer_path({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                          {"TORCHELASTIC_TIMER_FILE", "/x/t"}}) == "/x/t");
  const auto made = *file_timer_path({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TMPDIR", "/t"}});
  CHECK(made.rfind("/t/watchdog_timer_", 0) == 0);
  CHECK(made.size() == std::string("/t/watchdog_timer_").size() + 36);
  CHECK(file_timer_path({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}})->rfind("/tmp/", 0) == 0);
}
