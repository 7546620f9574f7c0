#include "trainrun/launch/hosts/hosts_outcome.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <vector>

using namespace trainrun::launch;

namespace {

HostEnd ended(int status, bool ready = true, std::string last_error = "", int killed_by = 0) {
  return HostEnd{status, killed_by, ready, std::move(last_error)};
}

}  // namespace

TEST_CASE("every agent succeeded: exit 0, said only at debug level", "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  CHECK(o.ended(0, ended(0), false, false).lines.empty());
  CHECK(o.ended(1, ended(0), false, false).lines.empty());
  CHECK(o.summary({true, true}) ==
        std::make_pair(std::string("agents ended: node1 exit 0, node2 exit 0"), Level::debug));
  CHECK(o.exit_code(0) == 0);
}

TEST_CASE("an agent's failure is the job's, the first one's status", "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  const HostVerdict first = o.ended(1, ended(3), false, false);
  CHECK(first.lines.empty());
  CHECK_FALSE(first.stop);
  CHECK(first.failure_grace);  // the others may still end on their own
  CHECK_FALSE(o.ended(0, ended(7), true, false).failure_grace);
  CHECK(o.summary({true, true}) ==
        std::make_pair(std::string("agents ended: node1 exit 7, node2 exit 3"), Level::info));
  CHECK(o.exit_code(0) == 3);
  CHECK(o.exit_code(SIGTERM) == 128 + SIGTERM);
}

TEST_CASE("an agent that did not start stops the job, naming why", "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  const HostVerdict v = o.ended(1, ended(127, false, "sh: trainrun: not found"), false, false);
  REQUIRE(v.lines.size() == 1);
  CHECK(v.lines[0].first ==
        "node2: cannot start its agent (ssh exit 127): sh: trainrun: not found; is trainrun "
        "installed at /usr/bin/trainrun on node2?");
  CHECK(v.lines[0].second == Level::error);
  CHECK(v.stop == std::string("stopping the agents on the other hosts"));
  CHECK(o.ended(0, ended(255, false), true, false).lines[0].first ==
        "node1: cannot start its agent (ssh exit 255): no message");
  CHECK(o.summary({false, false}).first == "agents ended: node1 not started, node2 not started");
  CHECK(o.exit_code(0) == 1);
}

TEST_CASE("an agent not started after a stop signal is not an error", "[hosts]") {
  HostsOutcome o({"node1"}, "/usr/bin/trainrun");
  const HostVerdict v = o.ended(0, ended(130, false), true, true);
  CHECK(v.lines.empty());
  CHECK_FALSE(v.stop);
  CHECK(o.exit_code(SIGINT) == 128 + SIGINT);
}

TEST_CASE("a lost ssh connection is the rendezvous' to decide on, not the job's status",
          "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  const HostVerdict lost = o.ended(1, ended(255, true, "Connection reset"), false, false);
  REQUIRE(lost.lines.size() == 1);
  CHECK(lost.lines[0].first ==
        "node2: ssh connection lost (Connection reset); node rank 1 is lost to the job, the "
        "rendezvous decides what follows");
  CHECK(lost.lines[0].second == Level::warning);
  const HostVerdict killed = o.ended(0, ended(128 + SIGKILL, true, "", SIGKILL), false, false);
  CHECK(killed.lines[0].first.find("(ssh ended by SIGKILL)") != std::string::npos);
  CHECK_FALSE(killed.failure_grace);
  // Nobody succeeded and nothing failed: 255, as ssh says it.
  CHECK(o.exit_code(0) == 255);
}

TEST_CASE("while the launcher stops the agents, a lost connection is said no more", "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  CHECK(o.ended(0, ended(255, true, "", SIGTERM), true, true).lines.empty());
  CHECK(o.ended(1, ended(0), true, true).lines.empty());
  CHECK(o.exit_code(0) == 0);
}
