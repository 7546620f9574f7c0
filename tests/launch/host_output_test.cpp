#include "hosts/host_output.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hosts/hosts_plan.hpp"

using namespace trainrun::launch;

namespace {

using Clock = HostOutput::Clock;
const auto t0 = Clock::time_point{} + std::chrono::hours(1);

std::vector<std::string> texts(const HostOutput::Lines& lines) {
  std::vector<std::string> t;
  for (const auto& l : lines) t.push_back(std::to_string(l.stream) + " " + l.line);
  return t;
}

using Texts = std::vector<std::string>;

}  // namespace

TEST_CASE("host output: whole lines, a worker's as it is, any other after its host", "[hosts]") {
  HostOutput out(false, std::chrono::seconds(1));
  out.add_host("alice@node1");
  out.add_host("node2");
  CHECK(texts(out.feed(0, 1, "[node1:0]:step 1\n[node1:0]:st", t0)) == Texts{"1 [node1:0]:step 1"});
  CHECK(texts(out.feed(1, 2, "Warning: Permanently added\n", t0)) ==
        Texts{"2 node2: Warning: Permanently added"});
  CHECK(texts(out.feed(0, 1, "ep 2\n", t0)) == Texts{"1 [node1:0]:step 2"});
  // A line without its end is a line once the stream ends; nothing is left after it.
  CHECK(texts(out.feed(0, 2, "trainrun: bye", t0)).empty());
  CHECK(texts(out.close(0, 2, t0)) == Texts{"2 alice@node1: trainrun: bye"});
  CHECK(texts(out.close(0, 2, t0)).empty());
  CHECK(out.last_error(0) == "trainrun: bye");
  CHECK(out.last_error(1) == "Warning: Permanently added");
}

TEST_CASE("host output: the agent's ready line is taken once, on stdout only", "[hosts]") {
  HostOutput out(false, std::chrono::seconds(1));
  out.add_host("node1");
  const std::string ready = std::string(kReadyLine) + "\n";
  CHECK_FALSE(out.ready(0));
  CHECK(texts(out.feed(0, 2, ready, t0)) == Texts{"2 node1: " + std::string(kReadyLine)});
  CHECK_FALSE(out.ready(0));
  CHECK(texts(out.feed(0, 1, ready, t0)).empty());
  CHECK(out.ready(0));
  CHECK(texts(out.feed(0, 1, ready, t0)) == Texts{"1 node1: " + std::string(kReadyLine)});
  CHECK(out.last_error(0) == kReadyLine);
}

TEST_CASE("host output with --dedup holds lines for the window", "[hosts]") {
  HostOutput out(true, std::chrono::seconds(1));
  out.add_host("node1");
  out.add_host("node2");
  CHECK(out.feed(0, 2, "[node1:0]:UserWarning\n", t0).empty());
  CHECK(out.feed(1, 2, "[node2:1]:UserWarning\n", t0).empty());
  CHECK(out.feed(1, 1, "plain\n", t0).empty());
  CHECK(out.next_due() == t0 + std::chrono::seconds(1));
  CHECK(out.due(t0).empty());
  CHECK(texts(out.due(t0 + std::chrono::seconds(1))) ==
        Texts{"2 [0-1]:UserWarning", "1 node2: plain"});
  CHECK(out.feed(0, 1, "[node1:0]:last\n", t0).empty());
  CHECK(texts(out.flush_all()) == Texts{"1 [node1:0]:last"});
}

TEST_CASE("host output: a trainrun line every agent says is shown once, from the first host",
          "[hosts]") {
  HostOutput out(false, std::chrono::seconds(1));
  out.add_host("node1");
  out.add_host("node2");
  const std::string stop = "trainrun: the job ends: node1 cannot reach node2:29501\n";
  CHECK(texts(out.feed(1, 2, stop, t0)) ==
        Texts{"2 node2: trainrun: the job ends: node1 cannot reach node2:29501"});
  CHECK(texts(out.feed(0, 2, stop, t0)).empty());
  // The first host may say it again (its own lines are never hidden), and other lines pass.
  CHECK(texts(out.feed(1, 2, stop, t0)).size() == 1);
  CHECK(texts(out.feed(0, 2, "trainrun: node rank 0\n", t0)) ==
        Texts{"2 node1: trainrun: node rank 0"});
  CHECK(texts(out.feed(1, 2, "[node2:0]:trainrun: a worker's line\n", t0)).size() == 1);
  CHECK(texts(out.feed(0, 2, "[node1:0]:trainrun: a worker's line\n", t0)).size() == 1);
}

TEST_CASE("host output: ssh's carriage return is not part of the line", "[hosts]") {
  HostOutput out(false, std::chrono::seconds(1));
  out.add_host("node1");
  CHECK(texts(out.feed(0, 2, "ssh: connect to host node1 port 22: Connection refused\r\n", t0)) ==
        Texts{"2 node1: ssh: connect to host node1 port 22: Connection refused"});
  CHECK(out.last_error(0) == "ssh: connect to host node1 port 22: Connection refused");
}

TEST_CASE("host output: once every host stops for the user, no node reads as lost", "[hosts]") {
  HostOutput out(false, std::chrono::seconds(1));
  out.add_host("node1");
  const std::string lost =
      "trainrun: rendezvous server: node n2 (10.0.0.2, pid 7) lost: left: n2 stopped by SIGINT\n";
  CHECK(texts(out.feed(0, 2, lost, t0)).size() == 1);
  out.stopping_every_host();
  CHECK(texts(out.feed(0, 2, "trainrun: received SIGINT; stopping 2 workers\n", t0)) ==
        Texts{"2 node1: trainrun: received SIGINT; stopping 2 workers"});
  for (const char* line :
       {"trainrun: rendezvous server: node n2 (10.0.0.2, pid 8) lost: left: n2 stopped by SIGINT",
        "trainrun: lost the rendezvous server at n1:29501: connection closed",
        "trainrun: job ends (node_lost): node n1 lost (left); so the job cannot continue"})
    CHECK(texts(out.feed(0, 2, std::string(line) + "\n", t0)).empty());
  // Other words, and the workers' own lines, still pass.
  CHECK(texts(out.feed(0, 2, "trainrun: 3 lost-and-found files, closeness\n", t0)).size() == 1);
  CHECK(texts(out.feed(0, 1, "[node1:0]:loss lost\n", t0)) == Texts{"1 [node1:0]:loss lost"});
}

TEST_CASE("host output: once the agent runs, ssh's last line is not the agent's", "[hosts]") {
  HostOutput out(false, std::chrono::seconds(1));
  out.add_host("node1");
  out.feed(0, 2, "Warning: Permanently added 'node1' to the list of known hosts.\r\n", t0);
  out.feed(0, 1, std::string(kReadyLine) + "\n", t0);
  out.feed(0, 2, "trainrun: node rank 1 of 2 nodes\n[node1:1]:Traceback\n", t0);
  CHECK(out.last_error(0) == "Warning: Permanently added 'node1' to the list of known hosts.");
  out.feed(0, 2, "Timeout, server node1 not responding.\r\n", t0);
  CHECK(out.last_error(0) == "Timeout, server node1 not responding.");
}
