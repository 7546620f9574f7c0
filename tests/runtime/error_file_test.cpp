#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <trainrun/runtime/error_file.hpp>
#include <trainrun/runtime/errors.hpp>

#include "worker_processes.hpp"

namespace rt = trainrun::runtime;

TEST_CASE("the error record has torchelastic's nested form") {
  const auto record =
      nlohmann::json::parse(rt::format_error_record("ValueError: bad", "#0 main", 1764468103));
  CHECK(record["message"]["message"] == "ValueError: bad");
  CHECK(record["message"]["extraInfo"]["py_callstack"] == "#0 main");
  CHECK(record["message"]["extraInfo"]["timestamp"] == "1764468103");
}

TEST_CASE("write_error_file creates the directory and replaces the file") {
  const std::string dir = rt::testing::make_temp_dir("errfile");
  const std::string path = dir + "/attempt_0/1/error.json";
  rt::write_error_file(path, "first", "");
  rt::write_error_file(path, "second", "stack");
  const auto record = nlohmann::json::parse(rt::testing::read_file(path));
  CHECK(record["message"]["message"] == "second");
  CHECK(std::stoll(record["message"]["extraInfo"]["timestamp"].get<std::string>()) > 1600000000);
  CHECK_THROWS_AS(rt::write_error_file("/proc/no/such/error.json", "x", ""), rt::RuntimeError);
}

TEST_CASE("describe_current_exception gives the type, the message and a stack") {
  rt::ExceptionReport report;
  try {
    throw std::out_of_range("index 9 of 3");
  } catch (...) {
    report = rt::describe_current_exception();
  }
  CHECK(report.message == "std::out_of_range: index 9 of 3");
  CHECK_THAT(report.stack, Catch::Contains("#0"));
  CHECK(rt::describe_current_exception().message == "no exception is being handled");
}
