#include "trainrun/launch/core/failure.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace trainrun::launch;
using trainrun::ExitStatus;

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

TEST_CASE("root cause is the earliest failure") {
  std::vector<ProcessFailure> f(3);
  f[0].rank = 0, f[0].timestamp = 20;
  f[1].rank = 1, f[1].timestamp = 10;
  f[2].rank = 2, f[2].timestamp = 10;
  CHECK(root_cause_index(f) == 1);
}

TEST_CASE("what travels to the other nodes: the earliest failures, text cut, control escaped") {
  std::vector<ProcessFailure> f(40);
  for (int i = 0; i < 40; ++i) f[i].rank = i, f[i].timestamp = 100 - i, f[i].host = "n";
  f[39].traceback = std::string(100000, 'x');
  f[39].has_error_file = true;
  f[39].error_file = "/logs/error.json";
  int not_relayed = -1;
  auto relayed = relayed_failures(f, &not_relayed);
  REQUIRE(relayed.size() == trainrun::rendezvous::kMaxRelayedFailures);
  CHECK(not_relayed == 8);
  CHECK(relayed[0].rank == 39);  // the root cause leads
  CHECK(relayed[0].traceback.size() < 2 * trainrun::rendezvous::kMaxRelayedTraceback);
  CHECK_THAT(relayed[0].traceback, Catch::Contains("/logs/error.json on n"));
  relayed[1].message = "\x1b[31mred";
  CHECK(from_relayed(relayed[1]).message == "\\x1b[31mred");
  // The root cause another decided stands, whatever the rule would say of the list given.
  const auto text = format_failure_summary("t", {f[0], f[1]}, 0, size_t{0}, 8);
  CHECK_THAT(text, Catch::Contains("Root Cause (first observed failure):\n[0]:"));
  CHECK_THAT(text, Catch::Contains("8 later failure(s) not relayed"));
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

TEST_CASE("failures are numbered by rank as torchrun numbers them, the root cause included") {
  ProcessFailure root;
  root.rank = 1, root.local_rank = 1, root.timestamp = 100, root.status = {3, 0};
  ProcessFailure low = root;
  low.rank = 0, low.local_rank = 0, low.timestamp = 200;
  ProcessFailure high = root;
  high.rank = 2, high.local_rank = 2, high.timestamp = 300;
  auto s = format_failure_summary("train.py", {high, root, low});
  const auto r0 = s.find("[0]:\n  time");
  const auto r2 = s.find("[2]:\n  time");
  const auto root_at = s.find("Root Cause (first observed failure):\n[1]:");
  REQUIRE(root_at != std::string::npos);
  CHECK(r0 < r2);
  CHECK(r2 < root_at);
  CHECK(s.find("rank      : 0 (local_rank: 0)") < s.find("rank      : 2 (local_rank: 2)"));
}

TEST_CASE("the rules are as wide as the widest line, 60 at most, as torchrun's") {
  ProcessFailure f;
  f.pid = 42;
  f.status = {0, SIGKILL};
  f.host = "n";
  // Widest: "  traceback : Signal 9 (SIGKILL) received by PID 42" (51).
  auto s = format_failure_summary("t.py", {f});
  CHECK_THAT(
      s, Catch::StartsWith(std::string(51, '=') + "\nt.py FAILED\n" + std::string(51, '-') + "\n"));
  f.status = {1, 0};
  CHECK_THAT(format_failure_summary("t.py", {f}), Catch::StartsWith(std::string(60, '=') + "\n"));
}

TEST_CASE("a summary within a limit keeps each traceback's head and tail and names its file") {
  ProcessFailure f;
  f.rank = 1;
  f.host = "node7";
  f.status = {1, 0};
  f.has_error_file = true;
  f.error_file = "/logs/attempt_0/1/error.json";
  f.traceback = "Traceback (most recent call last):\n" + std::string(2'000'000, 'x') +
                "\nRuntimeError: the last line\n";
  const size_t limit = 16 * 1024;
  auto s = format_failure_summary("train.py", {f}, limit);
  CHECK(s.size() <= limit);
  CHECK_THAT(s, Catch::Contains("traceback : Traceback (most recent call last):"));
  CHECK_THAT(s, Catch::Contains("RuntimeError: the last line"));
  CHECK_THAT(s, Catch::Contains("bytes not shown; the whole error is in "
                                "/logs/attempt_0/1/error.json on node7]"));
  CHECK_THAT(s, Catch::EndsWith(std::string(60, '=') + "\n"));
  // Without a limit, all of it, as torchrun prints it.
  CHECK(format_failure_summary("train.py", {f}).size() > 2'000'000);
}

TEST_CASE("without a limit every failure is whole, the others' as the root cause's") {
  ProcessFailure root;
  root.rank = 0;
  root.host = "node0";
  root.status = {3, 0};
  root.timestamp = 100;
  root.stderr_tail = std::string(1900, 'r') + "\nthe root's last line";
  ProcessFailure second = root;
  second.rank = 1;
  second.local_rank = 1;
  second.timestamp = 200;
  second.stderr_tail = "the second's first line\n" + std::string(1900, 's');
  ProcessFailure third = second;
  third.rank = 2;
  third.has_error_file = true;
  third.error_file = "/logs/attempt_0/2/error.json";
  third.traceback = "Traceback (most recent call last):\n" + std::string(3000, 't');
  auto s = format_failure_summary("train.py", {third, second, root});
  CHECK_THAT(s, !Catch::Contains("not shown"));
  CHECK_THAT(s, Catch::Contains("the second's first line\n  " + std::string(1900, 's')));
  CHECK_THAT(s, Catch::Contains("Traceback (most recent call last):\n  " + std::string(3000, 't')));
  CHECK_THAT(s, Catch::Contains(std::string(1900, 'r') + "\n  the root's last line"));
}

TEST_CASE("a summary within a limit keeps the root cause and counts the failures left out") {
  std::vector<ProcessFailure> many(200);
  for (int i = 0; i < 200; ++i) {
    many[i].rank = i;
    many[i].timestamp = i == 150 ? 1 : 100;
    many[i].status = {1, 0};
    many[i].traceback = std::string(1000, 'y') + " of rank " + std::to_string(i);
  }
  auto s = format_failure_summary("train.py", many, 16 * 1024);
  CHECK(s.size() <= 16 * 1024);
  CHECK_THAT(s, Catch::Contains("Root Cause (first observed failure):\n[150]:"));
  CHECK_THAT(s, Catch::Contains("more failure(s) not shown; each node's own summary lists all"));
  // A title too long for the limit: still within it.
  CHECK(format_failure_summary(std::string(20'000, 't'), many, 16 * 1024).size() <= 16 * 1024);
}

TEST_CASE("an error file over the read limit is named, not read") {
  const std::string path = trainrun::test::make_temp_dir("failure") + "/error.json";
  {
    std::string body = R"({"message": ")" + std::string(kMaxErrorFileBytes, 'z') + R"("})";
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fwrite(body.data(), 1, body.size(), f);
    std::fclose(f);
  }
  std::string problem;
  CHECK_FALSE(read_error_file(path, &problem));
  CHECK_THAT(problem, Catch::Contains("is too large") && Catch::Contains("not read"));
  std::remove(path.c_str());
}

TEST_CASE("a worker without error file: its log files and its stderr's last lines") {
  ProcessFailure f;
  f.rank = 1;
  f.local_rank = 1;
  f.pid = 42;
  f.status.code = 1;
  f.host = "h";
  f.error_file = "/logs/attempt_0/1/error.json";
  f.stdout_log = "/logs/attempt_0/1/stdout.log";
  f.stderr_log = "/logs/attempt_0/1/stderr.log";
  f.stderr_tail = "Traceback (most recent call last):\nValueError: bad";
  const std::string s = format_failure_summary("train.py", {f});
  CHECK_THAT(s,
             Catch::Contains("  error_file: <N/A>\n"
                             "  stdout    : /logs/attempt_0/1/stdout.log\n"
                             "  stderr    : /logs/attempt_0/1/stderr.log\n"
                             "  traceback : last 2 lines of its stderr (it wrote no error file):\n"
                             "  Traceback (most recent call last):\n"
                             "  ValueError: bad\n"));
  // An error file wins: its traceback is shown, not the stream's end.
  f.has_error_file = true;
  f.traceback = "from the error file";
  CHECK_THAT(
      format_failure_summary("train.py", {f}),
      Catch::Contains("traceback : from the error file") && !Catch::Contains("ValueError: bad"));
  // Stopped by a signal after it wrote its error file: the file's traceback, as torchrun shows.
  f.status = ExitStatus{0, SIGTERM};
  CHECK_THAT(format_failure_summary("train.py", {f}),
             Catch::Contains("traceback : from the error file") &&
                 !Catch::Contains("received by PID"));
  // Killed by a signal: torchrun's line, then the stream's end.
  f.has_error_file = false;
  f.status = ExitStatus{0, SIGSEGV};
  CHECK_THAT(format_failure_summary("train.py", {f}),
             Catch::Contains("traceback : Signal 11 (SIGSEGV) received by PID 42\n"
                             "  last 2 lines of its stderr"));
}
