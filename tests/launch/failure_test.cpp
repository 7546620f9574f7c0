#include "failure.hpp"

#include <catch2/catch.hpp>
#include <csignal>

using namespace trainrun::launch;

TEST_CASE("error file forms") {
  auto nested = parse_error_file(
      R"({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1764468103"}}})");
  CHECK(nested.message == "ValueError: bad");
  CHECK(nested.traceback == "Traceback ...");
  REQUIRE(nested.timestamp);
  CHECK(*nested.timestamp == 1764468103.0);
  auto plain = parse_error_file(R"({"message": "text", "timestamp": 1764468103})");
  CHECK(plain.message == "text");
  CHECK(*plain.timestamp == 1764468103.0);
  CHECK_FALSE(parse_error_file(R"({"message": "no time"})").timestamp);
  CHECK_THROWS(parse_error_file("{"));
  CHECK_THROWS(parse_error_file("[]"));
  CHECK_THROWS(parse_error_file(R"({"other": 1})"));
  CHECK_THROWS(parse_error_file(R"({"message": 3})"));
  CHECK_NOTHROW(parse_error_file(R"({"message": {"extraInfo": 5}})"));
}

// Found by fuzz/error_file_fuzz.cpp: "inf" reached a double → time_t conversion (undefined).
TEST_CASE("error file timestamps that are no time are ignored") {
  CHECK_FALSE(parse_error_file(R"({"message": "m", "timestamp": "inf"})").timestamp);
  CHECK_FALSE(parse_error_file(R"({"message": "m", "timestamp": "nan"})").timestamp);
  CHECK_FALSE(parse_error_file(R"({"message": "m", "timestamp": -1e300})").timestamp);
  CHECK_FALSE(parse_error_file(R"({"message": {"extraInfo": {"timestamp": 1e300}}})").timestamp);
  ProcessFailure f;
  f.timestamp = 1e300;
  CHECK(format_failure_summary("job", {f}).find("<invalid time>") != std::string::npos);
}

TEST_CASE("exit statuses") {
  ExitStatus s{0, SIGKILL};
  CHECK(s.failed());
  CHECK(s.shell_code() == 137);
  CHECK(ExitStatus{3, 0}.shell_code() == 3);
  CHECK_FALSE(ExitStatus{}.failed());
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(60) == "SIG60");
}

TEST_CASE("root cause is the earliest failure") {
  std::vector<ProcessFailure> f(3);
  f[0].rank = 0, f[0].timestamp = 20;
  f[1].rank = 1, f[1].timestamp = 10;
  f[2].rank = 2, f[2].timestamp = 10;
  CHECK(root_cause_index(f) == 1);
}

TEST_CASE("summary in torchrun's layout") {
  ProcessFailure a;
  a.rank = 1;
  a.local_rank = 1;
  a.pid = 7739;
  a.host = "node0";
  a.status = {3, 0};
  a.timestamp = 100;
  ProcessFailure b = a;
  b.rank = 2;
  b.local_rank = 0;
  b.pid = 42;
  b.host = "node1";
  b.status = {0, SIGKILL};
  b.timestamp = 200;
  auto s = format_failure_summary("train.py", {b, a});
  CHECK_THAT(s, Catch::StartsWith(std::string(60, '=') + "\ntrain.py FAILED\n"));
  const auto root = s.find("Root Cause (first observed failure):\n[0]:");
  REQUIRE(root != std::string::npos);
  CHECK(s.find("rank      : 1 (local_rank: 1)", root) != std::string::npos);
  CHECK(s.find("exitcode  : 3 (pid: 7739)", root) != std::string::npos);
  CHECK(s.find("error_file: <N/A>") != std::string::npos);
  const auto other = s.find("Failures:\n[1]:");
  REQUIRE(other != std::string::npos);
  CHECK(other < root);
  CHECK(s.find("host      : node1") < root);
  CHECK(s.find("Signal 9 (SIGKILL) received by PID 42") < root);
  auto single = format_failure_summary("x", {a});
  CHECK_THAT(single, Catch::Contains("<NO_OTHER_FAILURES>"));
}
