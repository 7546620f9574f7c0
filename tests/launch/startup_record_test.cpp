#include "agent/startup_record.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "worker_exit.hpp"

using namespace trainrun::launch;
using trainrun::ExitStatus;
namespace rendezvous = trainrun::rendezvous;
using Clock = StartupRecord::Clock;
using std::chrono::milliseconds;

namespace {

// A StartupRecord fed with made-up instants (`t(ms)`: ms after the job's start), keeping what it
// said and the last record it handed on.
struct Harness {
  Clock::time_point zero = Clock::time_point{} + std::chrono::hours(1);
  double unix_zero = 1000;
  std::vector<std::string> said;
  std::optional<AttemptStartup> summary;
  int changes = 0;
  std::map<std::pair<int, int>, std::string> reports;  // (restart, local rank): the file's text
  StartupRecord record{
      StartupRecord::Hooks{[this](const AttemptStartup& s) { summary = s, ++changes; },
                           [this](const std::string& line, Level) { said.push_back(line); },
                           [this](int restart_count, int local_rank) -> std::optional<std::string> {
                             const auto it = reports.find({restart_count, local_rank});
                             if (it == reports.end()) return std::nullopt;
                             return it->second;
                           }}};

  StartupRecord::Instant t(int ms) {
    return StartupRecord::Instant{zero + milliseconds(ms), unix_zero + ms / 1000.0};
  }
  void on(const AgentEvent& e, int ms) { record.on(e, t(ms)); }
  void start(const Topology& topology, int ms) {
    record.on(AgentAction{action::StartWorkers{topology, 0}}, t(ms));
  }
  void started(int restart_count, std::vector<int> at_ms, int ms) {
    event::WorkersStarted e{restart_count, {}, t(ms).at};
    for (std::size_t i = 0; i < at_ms.size(); ++i) e.started[static_cast<int>(i)] = t(at_ms[i]).at;
    on(e, ms);
  }
};

Topology node(int ranks, int restart_count = 0) {
  Topology t;
  t.local_world_size = ranks;
  t.world_size = ranks;
  t.group_world_size = 1;
  t.restart_count = restart_count;
  return t;
}

}  // namespace

TEST_CASE("the record keeps an attempt's start-up from the events and says it once complete") {
  Harness h;
  h.record.set_agent_store(true);
  h.on(event::StartSingleNode{29500}, 0);
  CHECK_FALSE(h.record.current());
  h.start(node(2), 100);
  REQUIRE(h.record.current());
  CHECK(h.record.current()->round_s == Approx(0.1));
  CHECK(h.record.current()->store == AttemptStartup::Store::here);
  h.started(0, {110, 120}, 130);
  CHECK(h.summary->workers_s == Approx(0.13));
  CHECK(h.summary->started.at(1) == Approx(0.12));
  h.on(event::ReachedStore{1}, 400);
  h.on(event::ReachedStore{std::nullopt}, 450);
  CHECK(h.said.empty());
  h.on(event::ReachedStore{0}, 500);
  REQUIRE(h.said.size() == 1);
  CHECK(h.said[0] == startup_line(*h.summary));
  CHECK(h.summary->at_store.at(0) == Approx(0.5));
  CHECK(h.summary->unattributed == 1);
  // Once: a late rank changes the record, not what was said.
  h.on(event::ReachedStore{0}, 600);
  CHECK(h.said.size() == 1);
  CHECK(h.summary->at_store.at(0) == Approx(0.5));
}

TEST_CASE("a connection's rank named after its lookup counts from its first request, in its attempt") {
  Harness h;
  h.record.set_agent_store(true);
  h.on(event::StartSingleNode{29500}, 0);
  h.start(node(2), 100);
  h.started(0, {110, 120}, 130);
  // The lookup of rank 1 ended at 900 ms; its first request came at 300 ms.
  h.on(event::ReachedStore{1, h.t(300).at, 0}, 900);
  CHECK(h.summary->at_store.at(1) == Approx(0.3));
  // A lookup of an attempt that is not the record's is dropped.
  h.on(event::ReachedStore{0, h.t(350).at, 1}, 950);
  CHECK_FALSE(h.summary->at_store.count(0));
  CHECK(h.summary->unattributed == 0);
}

TEST_CASE("the first outputs are said once every worker wrote; another attempt's are dropped") {
  Harness h;
  h.on(event::StartSingleNode{29500}, 0);
  h.start(node(2), 0);
  CHECK(h.record.current()->store == AttemptStartup::Store::worker);
  h.on(event::FirstOutput{0, 1}, 200);  // attempt 1's, not this one's
  CHECK(h.summary->first_output.empty());
  h.on(event::FirstOutput{0, 0}, 300);
  h.on(event::FirstOutput{0, 0}, 350);
  CHECK(h.summary->first_output.at(0) == Approx(0.3));
  const auto said = h.said.size();
  h.reports[{0, 1}] = "1001.5\n";
  h.on(event::FirstOutput{1, 0}, 400);
  REQUIRE(h.said.size() == said + 1);
  CHECK(h.said.back() == first_output_line(*h.summary));
  CHECK(h.summary->first_report.at(1) == Approx(1.5));
}

TEST_CASE("a restart counts from the failing worker's exit as it was reaped, then the next one") {
  Harness h;
  h.on(event::StartSingleNode{29500}, 0);
  h.start(node(2), 0);
  h.started(0, {1, 2}, 3);
  // Reaped at unix 1004.5 (4.5 s in), handled 0.5 s later; the stop after it does not count.
  auto exit = trainrun::test::worker_exit(1, ExitStatus{3, 0});
  exit.seen_at = 1004.5;
  h.on(event::WorkerExited{exit}, 5000);
  h.record.on(AgentAction{action::ArmGraceTimer{}}, h.t(5000));
  h.on(event::AttemptEnded{}, 6000);
  CHECK_FALSE(h.record.current());
  // Not complete before its end (no rank at the store): said then.
  REQUIRE(h.said.size() == 2);
  CHECK(h.said[0] == startup_line(*h.summary));
  h.start(node(2, 1), 7000);
  const AttemptStartup& s = *h.record.current();
  CHECK(s.origin == AttemptStartup::Origin::worker_exit);
  CHECK(s.origin_rank == 1);
  CHECK(s.origin_at == Approx(1004.5));
  CHECK(s.round_s == Approx(2.5));
  // A stop with no failure of this node before it: the next attempt counts from the stop.
  h.record.on(AgentAction{action::ArmGraceTimer{}}, h.t(8000));
  h.on(event::WorkerExited{trainrun::test::worker_exit(0, ExitStatus{0, SIGTERM})}, 8100);
  h.on(event::AttemptEnded{}, 9000);
  h.start(node(2, 2), 9500);
  CHECK(h.record.current()->origin == AttemptStartup::Origin::stop);
  CHECK(h.record.current()->round_s == Approx(1.5));
  // Nothing stopped it: from the last attempt's end.
  h.on(event::AttemptEnded{}, 10000);
  h.start(node(2, 3), 10250);
  CHECK(h.record.current()->origin == AttemptStartup::Origin::attempt_end);
  CHECK(h.record.current()->round_s == Approx(0.25));
}

TEST_CASE("a round counts as formed once its checks passed, or when it formed with none") {
  Harness h;
  h.on(event::StartInJob{}, 0);
  rendezvous::Assignment a;
  h.on(event::RoundFormed{a}, 200);
  h.on(event::Assignment{a}, 700);
  Topology t = node(1);
  t.group_rank = 1;
  t.group_world_size = 2;
  h.record.set_agent_store(true);
  h.start(t, 750);
  CHECK(h.record.current()->round_s == Approx(0.7));
  CHECK(h.record.current()->store == AttemptStartup::Store::other_node);
  h.on(event::AttemptEnded{}, 1000);
  h.on(event::RoundFormed{a}, 1300);
  h.start(t, 1350);
  CHECK(h.record.current()->round_s == Approx(0.3));
}
