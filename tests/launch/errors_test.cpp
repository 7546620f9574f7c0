#include "trainrun/launch/core/errors.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <string>

#include "test_support.hpp"

#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"

using namespace trainrun::launch;

namespace {

// The exit code of the LaunchError `f` throws; 0 when it throws none.
template <typename F>
int exit_code_of(F f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.exit_code();
  }
  return 0;
}

}  // namespace

TEST_CASE("each launcher error carries the exit status it stands for") {
  CHECK(exit_code_of([] { parse_command_line({"--nnodes=0", "x"}, {}); }) == 2);
  CHECK(exit_code_of([] { parse_command_line({}, {}); }) == 2);
  LaunchConfig missing = parse_command_line({"--no-python", "/nonexistent/prog"}, {}).config;
  CHECK(exit_code_of([&] { resolve_entrypoint(missing, {}); }) == 127);
  LaunchConfig directory = parse_command_line({"--no-python", "/"}, {}).config;
  CHECK(exit_code_of([&] { resolve_entrypoint(directory, {}); }) == 126);
  CHECK(SpawnError("x").exit_code() == 1);
  CHECK(SetupError("x").exit_code() == 1);
}

TEST_CASE("a command not found beside a Python script of its name names the script") {
  const std::string dir = trainrun::test::make_temp_dir("entrypoint_hint");
  char here[4096];
  REQUIRE(::getcwd(here, sizeof here) != nullptr);
  REQUIRE(::chdir(dir.c_str()) == 0);
  std::string without, with;
  const std::map<std::string, std::string> env = {{"PATH", "/nonexistent"}};
  LaunchConfig c = parse_command_line({"check_nodes_here"}, {}).config;
  try {
    resolve_entrypoint(c, env);
  } catch (const LaunchError& e) {
    without = e.what();
  }
  { std::ofstream(dir + "/check_nodes_here.py") << "print('hi')\n"; }
  try {
    resolve_entrypoint(c, env);
  } catch (const LaunchError& e) {
    with = e.what();
  }
  REQUIRE(::chdir(here) == 0);
  CHECK(without == "check_nodes_here: command not found on PATH");
  CHECK(with == "check_nodes_here: command not found on PATH (check_nodes_here.py is in this "
                "directory: trainrun check_nodes_here.py runs it)");
}

TEST_CASE("the launcher's own lines carry its name") {
  CHECK(launcher_line("received SIGTERM") == "trainrun: received SIGTERM\n");
}
