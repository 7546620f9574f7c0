// The Python bootstrap's directory and the environment that brings it into a worker.
#include "workers/python_bootstrap.hpp"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "trainrun/launch/core/errors.hpp"

using namespace trainrun::launch;
using nlohmann::json;

namespace {

// The value of NAME in `env`, or "<unset>".
std::string value(const std::vector<std::string>& env, const std::string& name) {
  std::string found = "<unset>";
  int count = 0;
  for (const std::string& entry : env)
    if (entry.rfind(name + "=", 0) == 0) found = entry.substr(name.size() + 1), ++count;
  REQUIRE(count <= 1);
  return found;
}

// TMPDIR set to `dir` for the scope.
struct TmpDir {
  std::string before;
  bool had;
  explicit TmpDir(const std::string& dir) : had(std::getenv("TMPDIR") != nullptr) {
    if (had) before = std::getenv("TMPDIR");
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~TmpDir() { had ? (void)::setenv("TMPDIR", before.c_str(), 1) : (void)::unsetenv("TMPDIR"); }
};

}  // namespace

TEST_CASE("the bootstrap's directory comes first on PYTHONPATH; the user's is said",
          "[bootstrap]") {
  const auto unset = bootstrap_environment({"RANK=0"}, "/b", {{"diagnosis", 5}});
  CHECK(value(unset, "PYTHONPATH") == "/b");
  CHECK(json::parse(value(unset, "TRAINRUN_BOOTSTRAP")) ==
        json({{"diagnosis", 5}, {"pythonpath", "unset"}}));
  CHECK(value(unset, "RANK") == "0");

  const auto empty = bootstrap_environment({"PYTHONPATH="}, "/b", json::object());
  CHECK(value(empty, "PYTHONPATH") == "/b");  // "/b:" would put the working directory on it
  CHECK(json::parse(value(empty, "TRAINRUN_BOOTSTRAP"))["pythonpath"] == "empty");

  const auto after = bootstrap_environment({"PYTHONPATH=/u:/v", "TRAINRUN_BOOTSTRAP=old"}, "/b",
                                           {{"template", {{"prefix", 3}}}});
  CHECK(value(after, "PYTHONPATH") == "/b:/u:/v");
  CHECK(json::parse(value(after, "TRAINRUN_BOOTSTRAP")) ==
        json({{"template", {{"prefix", 3}}}, {"pythonpath", "after"}}));
}

TEST_CASE("the bootstrap's directory is private, holds the Python, and goes with its object",
          "[bootstrap]") {
  const std::string tmp = trainrun::test::make_temp_dir("bootstrap");
  TmpDir scoped(tmp);
  std::string dir;
  {
    PythonBootstrap python;
    dir = python.dir();
    CHECK(dir.rfind(tmp + "/trainrun-python-", 0) == 0);
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(::access((dir + "/sitecustomize.py").c_str(), R_OK) == 0);
    CHECK(::access((dir + "/trainrun_diagnosis.py").c_str(), R_OK) == 0);
  }
  CHECK(::access(dir.c_str(), F_OK) != 0);
}

TEST_CASE("a bootstrap that cannot be written says where and why", "[bootstrap]") {
  const std::string colon = trainrun::test::make_temp_dir("bootstrap:colon");
  {
    TmpDir scoped("/nonexistent-trainrun-test");
    CHECK_THROWS_WITH(PythonBootstrap(),
                      "cannot create a directory for the workers' Python under "
                      "/nonexistent-trainrun-test: No such file or directory");
  }
  TmpDir scoped(colon);
  CHECK_THROWS_WITH(PythonBootstrap(),
                    Catch::Contains("a directory on PYTHONPATH cannot hold ':'"));
}
