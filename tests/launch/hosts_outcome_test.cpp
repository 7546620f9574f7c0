#include "hosts/hosts_outcome.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <vector>

using namespace trainrun::launch;

namespace {

HostEnd ended(int status, bool ready = true, std::string last_error = "", int killed_by = 0) {
  return HostEnd{status, killed_by, ready, std::move(last_error)};
}

// What the launcher says of a host's end, a line each, its level first.
std::vector<std::string> said(const HostVerdict& v) {
  std::vector<std::string> out;
  for (const auto& [line, level] : v.lines)
    out.push_back((level == Level::error     ? "error: "
                   : level == Level::warning ? "warning: "
                                             : "") +
                  line);
  return out;
}

using Lines = std::vector<std::string>;

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
  CHECK(said(v) == Lines{"error: node2: cannot start its agent (ssh exit 127): sh: trainrun: not "
                         "found; is trainrun installed at /usr/bin/trainrun on node2?"});
  CHECK(v.stop == std::string("stopping the agents on the other hosts"));
  CHECK(said(o.ended(0, ended(255, false), true, false)) ==
        Lines{"error: node1: cannot start its agent (ssh exit 255): no message"});
  CHECK(o.summary({false, false}).first == "agents ended: node1 not started, node2 not started");
  CHECK(o.exit_code(0) == 1);
}

TEST_CASE("an agent not started after a stop signal is not an error", "[hosts]") {
  HostsOutcome o({"node1"}, "/usr/bin/trainrun");
  const HostVerdict v = o.ended(0, ended(130, false), true, true);
  CHECK(said(v).empty());
  CHECK_FALSE(v.stop);
  CHECK(o.exit_code(SIGINT) == 128 + SIGINT);
}

TEST_CASE("a lost ssh connection is the rendezvous' to decide on, not the job's status",
          "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  CHECK(
      said(o.ended(1, ended(255, true, "Connection reset"), false, false)) ==
      Lines{"warning: node2: ssh connection lost (ssh exit 255: Connection reset); node rank 1 is "
            "lost to the job, the rendezvous decides what follows"});
  const HostVerdict killed = o.ended(0, ended(128 + SIGKILL, true, "", SIGKILL), false, false);
  CHECK(said(killed) == Lines{"warning: node1: ssh connection lost (ssh ended by SIGKILL); node "
                              "rank 0 is lost to the job, the rendezvous decides what follows"});
  CHECK_FALSE(killed.failure_grace);
  // ssh said nothing of it (LogLevel=ERROR): its status alone.
  HostsOutcome quiet({"node1"}, "/usr/bin/trainrun");
  CHECK(said(quiet.ended(0, ended(255, true, ""), false, false)) ==
        Lines{"warning: node1: ssh connection lost (ssh exit 255); node rank 0 is lost to the job, "
              "the rendezvous decides what follows"});
  // Nobody succeeded and nothing failed: 255, as ssh says it.
  CHECK(o.exit_code(0) == 255);
}

TEST_CASE("while the launcher stops the agents, a lost connection is said no more", "[hosts]") {
  HostsOutcome o({"node1", "node2"}, "/usr/bin/trainrun");
  CHECK(o.ended(0, ended(255, true, "", SIGTERM), true, true).lines.empty());
  CHECK(o.ended(1, ended(0), true, true).lines.empty());
  CHECK(o.exit_code(0) == 0);
}
