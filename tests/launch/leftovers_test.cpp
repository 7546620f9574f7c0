#include "workers/leftovers.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "trainrun/base/processes.hpp"

using namespace trainrun::launch;
using trainrun::group_members;

TEST_CASE("a process is named by its pid and command line", "[leftovers]") {
  const std::string me = describe_process(getpid());
  CHECK_THAT(me, Catch::StartsWith("pid " + std::to_string(getpid()) + " ("));
  CHECK_THAT(me, Catch::Contains("launch_workers_unit_test"));
  CHECK(me.size() < 120);  // the command is cut at 80 bytes
}

TEST_CASE("this process is found in its own process group", "[leftovers]") {
  const auto members = group_members(getpgrp());
  CHECK(std::find(members.begin(), members.end(), getpid()) != members.end());
}

TEST_CASE("the leftovers line names the first few, counts the rest and says when SIGKILL comes",
          "[leftovers]") {
  const pid_t me = getpid();
  const std::string line = leftovers_line({me, me}, 2.4);
  CHECK_THAT(line, Catch::StartsWith("waiting for 1 process the workers left, still running "
                                     "after SIGTERM: pid " +
                                     std::to_string(me) + " ("));
  CHECK_THAT(line, Catch::EndsWith("; SIGKILL in 2 s (--shutdown-timeout)"));
  CHECK_THAT(leftovers_line({1, 2, 3, 4, 5, 6}, 0), Catch::Contains(" and 2 more; SIGKILL in 0 s"));
}
