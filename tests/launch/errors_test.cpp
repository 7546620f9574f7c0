#include "trainrun/launch/core/errors.hpp"

#include <catch2/catch.hpp>

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

TEST_CASE("the launcher's own lines carry its name") {
  CHECK(launcher_line("received SIGTERM") == "trainrun: received SIGTERM\n");
}
