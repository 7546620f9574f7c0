#include "agent/workers_python.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace trainrun::launch;

TEST_CASE("a program that is no Python has no version and gets torch 2.x's variables", "[agent]") {
  WorkersPython python("/bin/true", PythonSource::path);
  std::vector<std::string> said;
  const auto major = python.inspect([&](const std::string& line, Level) { said.push_back(line); });
  CHECK_FALSE(major);
  CHECK(python.torch_version().empty());
  CHECK(python.version().empty());
  REQUIRE_FALSE(said.empty());
  CHECK(said.back() == "/bin/true: no PyTorch version found; workers get torch 2.x's variables");
}

TEST_CASE("the hint for a missing torch names the interpreter and PYTHON_EXEC", "[agent]") {
  WorkersPython from_path("/bin/true", PythonSource::path);
  WorkersPython from_variable("/bin/true", PythonSource::variable);
  const std::string path_hint = from_path.missing_torch_hint(3);
  CHECK(path_hint.find("rank 3") != std::string::npos);
  CHECK(path_hint.find("/bin/true") != std::string::npos);
  CHECK(path_hint.find("PYTHON_EXEC") != std::string::npos);
  // Whether PYTHON_EXEC chose it is part of the hint.
  CHECK(from_variable.missing_torch_hint(3) != path_hint);
}
