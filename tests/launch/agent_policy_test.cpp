#include "agent/agent_policy.hpp"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <vector>

#include "worker_exit.hpp"

using namespace trainrun::launch;
using trainrun::ExitStatus;
using trainrun::signal_name;
namespace rendezvous = trainrun::rendezvous;
using std::chrono::seconds;
using Lines = std::vector<std::string>;

namespace {

LaunchConfig config(int nproc, int max_restarts = 0) {
  LaunchConfig c;
  c.nproc_per_node = nproc;
  c.max_restarts = max_restarts;
  c.master_addr = "10.0.0.1";
  c.entrypoint = "train.py";
  c.shutdown_timeout = 30;
  c.stop_signals = {SIGINT, SIGTERM};
  c.forward_signals = {SIGUSR1};
  return c;
}

// Drives an AgentPolicy with a fake clock and writes each action as one line, so that tests
// compare whole sequences exactly. Summaries are kept aside: their layout is failure_test's.
// Group rank `group_rank` (its first rank `base_rank`) of two nodes' round of two ranks each.
rendezvous::Assignment two_nodes(int group_rank, int base_rank, int restart_count) {
  rendezvous::Assignment a;
  a.group_rank = group_rank;
  a.group_world_size = 2;
  a.base_rank = base_rank;
  a.local_world_size = 2;
  a.world_size = 4;
  a.master_addr = "hostb";
  a.master_port = 31000;
  a.restart_count = restart_count;
  a.max_restarts = 3;
  return a;
}

// Group rank 1 of two nodes' round, with the nodes' addresses; `peers`: the nodes its preflight
// checks.
rendezvous::Assignment round_of(int restart_count, int peers) {
  rendezvous::Assignment a = two_nodes(1, 2, restart_count);
  a.node_addresses = {"10.0.0.1", "10.0.0.2"};
  for (int i = 0; i < peers; ++i) a.preflight.emplace_back().host = "hostb";
  return a;
}

struct Harness {
  explicit Harness(LaunchConfig c, std::string one_node_master_addr = {})
      : policy(std::move(c), "hosta", std::move(one_node_master_addr)) {}

  AgentPolicy::Clock::time_point now = AgentPolicy::Clock::time_point{} + std::chrono::hours(1);
  AgentPolicy policy;
  std::vector<std::string> summaries;
  std::vector<rendezvous::FailureReport> reports;

  Lines take(const AgentActions& actions) {
    Lines out;
    for (const AgentAction& a : actions) out.push_back(std::visit(*this, a));
    return out;
  }

  std::string operator()(const action::StartWorkers& a) {
    const Topology& t = a.topology;
    return fmt::format("start group {}/{} base {} local {} world {} master {}:{} restart {} of {}",
                       t.group_rank, t.group_world_size, t.base_rank, t.local_world_size,
                       t.world_size, t.master_addr, t.master_port, t.restart_count, a.max_restarts);
  }
  std::string operator()(const action::SignalWorkers& a) {
    return "signal " + signal_name(a.signal) + (a.whole_group ? "" : " (workers alone)") +
           (a.stop ? "" : " (passed on)");
  }
  std::string operator()(const action::ArmGraceTimer& a) {
    return fmt::format("grace timer +{}s",
                       std::chrono::duration_cast<seconds>(a.deadline - now).count());
  }
  std::string operator()(const action::Sweep& a) { return fmt::format("sweep {}", a.grace); }
  std::string operator()(const action::Join&) { return "join"; }
  std::string operator()(const action::StoreForRound& a) {
    std::string line = "store for round:";
    for (const auto& address : a.node_addresses) line += " " + address;
    return line;
  }
  std::string operator()(const action::CheckRound& a) {
    return fmt::format("check round: {} peer(s)", a.assignment.preflight.size());
  }
  std::string operator()(const action::DropChecks&) { return "drop checks"; }
  std::string operator()(const action::AbortRendezvous& a) { return "abort: " + a.reason; }
  std::string operator()(const action::ReportFailure& a) {
    reports.push_back(a.failure);
    return fmt::format("report failure of rank {} (local rank {}) on {}: exit code {}",
                       a.failure.rank, a.failure.local_rank, a.failure.host, a.failure.exit_code);
  }
  std::string operator()(const action::ReportEnded& a) {
    return fmt::format("report ended: {} failed", a.failures.size());
  }
  std::string operator()(const action::ReportDone&) { return "report done"; }
  std::string operator()(const action::ShutdownRendezvous& a) { return "shutdown: " + a.reason; }
  std::string operator()(const action::Say& a) { return "say: " + a.line; }
  std::string operator()(const action::WriteSummary& a) {
    summaries.push_back(a.text);
    return "summary";
  }
  std::string operator()(const action::Finish& a) { return fmt::format("finish {}", a.exit_code); }

  Lines on(const AgentEvent& e) { return take(policy.handle(e, now)); }
  Lines start(int port = 29500) { return on(event::StartSingleNode{port}); }
  Lines join() { return on(event::StartInJob{}); }
  // A worker's end; `message` non-empty: it left an error file written at `written`.
  Lines exit(int local_rank, ExitStatus status, const std::string& message = "",
             double written = 0) {
    return on(
        event::WorkerExited{trainrun::test::worker_exit(local_rank, status, message, written)});
  }
  Lines ended() { return on(event::AttemptEnded{}); }
  Lines signal(int sig) { return on(event::Signal{sig}); }
  Lines grace() { return on(event::GraceExpired{}); }
  Lines assign(int group_rank, int base_rank, int restart_count) {
    return on(event::Assignment{two_nodes(group_rank, base_rank, restart_count)});
  }
  Lines restart(const rendezvous::Restart& r) { return on(event::Restart{r}); }
  Lines stop(const rendezvous::Stop& s) { return on(event::Stop{s}); }
  Lines halt() { return on(event::Halt{rendezvous::Halt{0, "a worker failed"}}); }
};

const ExitStatus ok{0, 0};
ExitStatus code(int c) { return ExitStatus{c, 0}; }
ExitStatus killed(int sig) { return ExitStatus{0, sig}; }

rendezvous::FailureReport failure_on(const std::string& host, int rank, int exit_code) {
  rendezvous::FailureReport f;
  f.host = host;
  f.rank = rank;
  f.local_rank = rank % 2;
  f.exit_code = exit_code;
  f.summary = "the summary from " + host + "\n";
  return f;
}

}  // namespace

TEST_CASE("a single node whose workers all succeed exits 0", "[agent]") {
  Harness h(config(2));
  CHECK(h.start(29501) == Lines{"start group 0/1 base 0 local 2 world 2 master 10.0.0.1:29501 "
                                "restart 0 of 0"});
  CHECK(h.policy.state() == AgentPolicy::State::running);
  CHECK(h.exit(1, ok).empty());
  CHECK(h.exit(0, ok) == Lines{"sweep 30"});
  CHECK(h.policy.state() == AgentPolicy::State::finishing);
  CHECK(h.ended() == Lines{"finish 0"});
  CHECK(h.policy.done());
}

TEST_CASE("a one-node job's workers meet at the address the agent gives", "[agent]") {
  LaunchConfig c = config(1);
  c.standalone = true;
  Harness h(c, "gpu1.example.org");
  CHECK(h.start(40000) == Lines{"start group 0/1 base 0 local 1 world 1 master "
                                "gpu1.example.org:40000 restart 0 of 0"});
}

TEST_CASE("a failure stops the group, SIGKILL follows the grace period", "[agent]") {
  Harness h(config(2));
  h.start();
  CHECK(h.exit(0, code(3)) == Lines{"signal SIGTERM", "grace timer +30s"});
  CHECK(h.policy.state() == AgentPolicy::State::stopping);
  h.now += seconds(29);
  CHECK(h.grace().empty());  // not due yet
  h.now += seconds(1);
  CHECK(h.grace() == Lines{"say: 1 worker still running 30 s after the stop signal; "
                           "sending SIGKILL",
                           "signal SIGKILL"});
  // Killed because we asked: not a failure of its own.
  CHECK(h.exit(1, killed(SIGKILL)) == Lines{"sweep 30"});
  CHECK(h.policy.failures().size() == 1);
  CHECK(h.ended() == Lines{"summary", "finish 3"});
  REQUIRE(h.summaries.size() == 1);
  CHECK(h.summaries[0].find("train.py FAILED") != std::string::npos);
  CHECK(h.summaries[0].find("<NO_OTHER_FAILURES>") != std::string::npos);
}

TEST_CASE("the grace timer finds every worker gone: no SIGKILL", "[agent]") {
  Harness h(config(2));
  h.start();
  h.exit(0, code(1));
  h.now += seconds(30);
  CHECK(h.exit(1, killed(SIGTERM)) == Lines{"sweep 30"});
  CHECK(h.grace().empty());
}

TEST_CASE("a worker that reports its own error while the group stops counts", "[agent]") {
  Harness h(config(3));
  h.start();
  h.exit(0, code(2));
  CHECK(h.exit(1, code(5), "RuntimeError: boom", 100).empty());
  CHECK(h.exit(2, killed(SIGTERM)) == Lines{"sweep 30"});
  REQUIRE(h.policy.failures().size() == 2);
  // The root cause is the earliest: worker 1 wrote its error at 100, worker 0 was seen at 5000.
  CHECK(h.ended() == Lines{"summary", "finish 5"});
  CHECK(h.summaries[0].find("error_file: /logs/1/error.json") != std::string::npos);
}

TEST_CASE("workers that fail on their own while the group stops are listed too", "[agent]") {
  Harness h(config(4));
  h.start();
  h.exit(0, code(2));
  // Ended by itself (its exit had not been seen when the stop was sent), and by a crash.
  CHECK(h.exit(2, code(7)).empty());
  CHECK(h.exit(1, killed(SIGSEGV)).empty());
  // Ended by our SIGTERM: not a failure of its own.
  CHECK(h.exit(3, killed(SIGTERM)) == Lines{"sweep 30"});
  REQUIRE(h.policy.failures().size() == 3);
  CHECK(h.ended() == Lines{"summary", "finish 2"});
  // torchrun's layout: the others in rank order, numbered by rank order, then the root cause.
  const std::string& s = h.summaries[0];
  const auto r1 = s.find("Failures:\n[1]:\n");
  const auto r2 = s.find("[2]:\n");
  const auto root = s.find("Root Cause (first observed failure):\n[0]:\n");
  REQUIRE(root != std::string::npos);
  REQUIRE(r1 != std::string::npos);
  CHECK(r1 < r2);
  CHECK(r2 < root);
  CHECK(s.find("Signal 11 (SIGSEGV)") < r2);
}

TEST_CASE("an unreadable error file is said, the failure still counts", "[agent]") {
  Harness h(config(1));
  h.start();
  WorkerExit e;
  e.local_rank = 0;
  e.status = code(1);
  e.problem = "error file /logs/0/error.json: not JSON";
  CHECK(h.on(event::WorkerExited{e}) ==
        Lines{"say: worker 0 (local rank 0): error file /logs/0/error.json: not JSON",
              "signal SIGTERM", "grace timer +30s", "sweep 30"});
  CHECK(h.policy.failures().size() == 1);
}

TEST_CASE("restarts up to max_restarts, then the root cause's exit code", "[agent]") {
  Harness h(config(1, 2));
  h.start();
  CHECK(h.exit(0, code(3)) == Lines{"signal SIGTERM", "grace timer +30s", "sweep 30"});
  CHECK(h.ended() == Lines{"say: worker 0 (local rank 0) failed with exit code 3; restarting the "
                           "worker group (1 of 2 restarts)",
                           "start group 0/1 base 0 local 1 world 1 master 10.0.0.1:29500 "
                           "restart 1 of 2"});
  CHECK(h.policy.failures().empty());
  h.exit(0, killed(SIGSEGV));
  CHECK(h.ended() == Lines{"say: worker 0 (local rank 0) failed with exit code 139; restarting the "
                           "worker group (2 of 2 restarts)",
                           "start group 0/1 base 0 local 1 world 1 master 10.0.0.1:29500 "
                           "restart 2 of 2"});
  h.exit(0, killed(SIGKILL));
  CHECK(h.ended() == Lines{"summary", "finish 137"});
  CHECK(h.policy.restart_count() == 2);
}

TEST_CASE("a stop signal stops the workers and exits 128+N; a second one kills", "[agent]") {
  Harness h(config(2));
  h.start();
  CHECK(h.signal(SIGINT) == Lines{"say: received SIGINT; stopping 2 workers (30 s grace before "
                                  "SIGKILL)",
                                  "signal SIGINT", "grace timer +30s"});
  h.now += seconds(2);
  CHECK(h.signal(SIGTERM) ==
        Lines{"say: received SIGTERM again; killing the workers now", "signal SIGKILL"});
  // Ending as asked is no failure.
  CHECK(h.exit(0, killed(SIGINT)).empty());
  CHECK(h.exit(1, killed(SIGKILL)) == Lines{"sweep 30"});
  CHECK(h.policy.failures().empty());
  CHECK(h.signal(SIGINT).empty());  // finishing: nothing left to stop
  CHECK(h.ended() == Lines{"finish 130"});
}

TEST_CASE("a stop while the group waits for its --preload template starts no worker", "[agent]") {
  SECTION("a signal: the node exits 128+N") {
    Harness h(config(2));
    h.start();
    CHECK(h.signal(SIGINT) == Lines{"say: received SIGINT; stopping 2 workers (30 s grace "
                                    "before SIGKILL)",
                                    "signal SIGINT", "grace timer +30s"});
    // The workers' start was dropped: nothing to wait for but the sweep.
    CHECK(h.on(event::StartCancelled{}) == Lines{"sweep 0"});
    CHECK(h.policy.failures().empty());
    CHECK(h.ended() == Lines{"finish 130"});
  }
  SECTION("in a job, another node's failure: this node ends as its attempt would") {
    Harness h(config(2));
    h.join();
    h.assign(1, 2, 0);
    CHECK(h.halt() == Lines{"signal SIGTERM", "grace timer +30s"});
    CHECK(h.on(event::StartCancelled{}) == Lines{"sweep 0"});
    CHECK(h.policy.failures().empty());
  }
  SECTION("after the group ended, a late cancel changes nothing") {
    Harness h(config(1));
    h.start();
    CHECK(h.exit(0, ok) == Lines{"sweep 30"});
    CHECK(h.on(event::StartCancelled{}).empty());
  }
}

TEST_CASE("a stop signal after a failure takes over the exit code", "[agent]") {
  Harness h(config(2));
  h.start();
  h.exit(0, code(4));
  CHECK(h.signal(SIGTERM) == Lines{"say: received SIGTERM; stopping 1 worker (30 s grace "
                                   "before SIGKILL)",
                                   "signal SIGTERM", "grace timer +30s"});
  h.exit(1, killed(SIGTERM));
  CHECK(h.ended() == Lines{"finish 143"});
}

TEST_CASE("forwarded signals only reach the worker processes", "[agent]") {
  LaunchConfig c = config(2);
  c.forward_signals = {SIGUSR1, SIGCONT};
  Harness h(c);
  h.start();
  CHECK(h.signal(SIGUSR1) == Lines{"signal SIGUSR1 (workers alone) (passed on)"});
  CHECK(h.signal(SIGCONT) == Lines{"signal SIGCONT (passed on)"});
  CHECK(h.policy.state() == AgentPolicy::State::running);
}

TEST_CASE("a stop signal while waiting for the rendezvous ends at once", "[agent]") {
  Harness h(config(2));
  CHECK(h.join() == Lines{"join"});
  CHECK(h.signal(SIGTERM) == Lines{"say: received SIGTERM; no worker is running: leaving the "
                                   "rendezvous",
                                   "shutdown: hosta stopped by SIGTERM", "finish 143"});
  CHECK(h.policy.done());
  CHECK(h.signal(SIGTERM).empty());
  CHECK(h.assign(0, 0, 0).empty());
  CHECK(h.stop(rendezvous::Stop{}).empty());
}

TEST_CASE("a job of one node at most keeps the agent's address for its store", "[agent]") {
  LaunchConfig c = config(2);
  c.rdzv_backend = RendezvousBackend::c10d;
  Harness alone(c, "gpu1.example.org");
  alone.join();
  CHECK(alone.assign(0, 0, 0) == Lines{"start group 0/2 base 0 local 2 world 4 master "
                                       "gpu1.example.org:31000 restart 0 of 3"});
  c.max_nodes = 2;
  Harness elastic(c, "gpu1.example.org");
  elastic.join();
  CHECK(elastic.assign(0, 0, 0) ==
        Lines{"start group 0/2 base 0 local 2 world 4 master hostb:31000 restart 0 of 3"});
}

TEST_CASE("in a job: done at the exit barrier, finished by the rendezvous", "[agent]") {
  Harness h(config(2));
  h.join();
  CHECK(h.assign(1, 2, 0) ==
        Lines{"start group 1/2 base 2 local 2 world 4 master hostb:31000 restart 0 of 3"});
  CHECK(h.assign(0, 0, 0).empty());  // already running
  h.exit(0, ok);
  CHECK(h.exit(1, ok) == Lines{"sweep 30"});
  CHECK(h.ended() == Lines{"report done"});
  CHECK(h.policy.state() == AgentPolicy::State::idle);
  CHECK(h.stop(rendezvous::Stop{rendezvous::StopCause::finished, "", 0, std::nullopt}) ==
        Lines{"finish 0"});
}

TEST_CASE("in a job: a local failure is reported once, then the job decides", "[agent]") {
  Harness h(config(2));
  h.join();
  h.assign(1, 2, 0);
  CHECK(h.exit(1, code(7)) == Lines{"report failure of rank 3 (local rank 1) on hosta: exit code 7",
                                    "signal SIGTERM", "grace timer +30s"});
  REQUIRE(h.reports.size() == 1);
  CHECK(h.reports[0].summary.find("train.py FAILED") != std::string::npos);
  CHECK(h.exit(0, killed(SIGTERM)) == Lines{"sweep 30"});
  // Our failure is reported and the decision is on its way: no exit barrier.
  CHECK(h.ended().empty());

  SECTION("restarted: join the next round") {
    rendezvous::Restart r;
    r.restart_count = 1;
    r.failure = failure_on("hosta", 3, 7);
    CHECK(h.restart(r) == Lines{"join"});  // our own failure: nothing more to say
    CHECK(h.assign(1, 2, 1) ==
          Lines{"start group 1/2 base 2 local 2 world 4 master hostb:31000 restart 1 of 3"});
  }
  SECTION("stopped with our failure: our own summary and exit code") {
    rendezvous::Stop s{rendezvous::StopCause::worker_failed, "restarts exhausted", 7,
                       failure_on("hosta", 3, 7)};
    CHECK(h.stop(s) == Lines{"summary", "finish 7"});
    CHECK(h.summaries[0].find("train.py FAILED") != std::string::npos);
  }
}

TEST_CASE("in a job: a failure on another host restarts this node's workers", "[agent]") {
  Harness h(config(2));
  h.join();
  h.assign(0, 0, 0);
  rendezvous::Restart r;
  r.restart_count = 1;
  r.failure = failure_on("hostb", 3, 1);
  CHECK(h.restart(r) == Lines{"say: worker 3 on hostb failed with exit code 1; restarting (1 of 3 "
                              "restarts)",
                              "signal SIGTERM", "grace timer +30s"});
  // Stopped on request: neither a failure nor a report.
  CHECK(h.exit(0, killed(SIGTERM)).empty());
  CHECK(h.exit(1, code(1)) == Lines{"sweep 30"});
  CHECK(h.policy.failures().empty());
  CHECK(h.reports.empty());
  CHECK(h.ended() == Lines{"join"});
  CHECK(h.assign(0, 0, 1) ==
        Lines{"start group 0/2 base 0 local 2 world 4 master hostb:31000 restart 1 of 3"});
}

TEST_CASE("in a job: a new round without a failure, while waiting", "[agent]") {
  Harness h(config(1));
  h.join();
  h.assign(0, 0, 0);
  h.exit(0, ok);
  CHECK(h.ended() == Lines{"report done"});
  rendezvous::Restart r;
  r.cause = rendezvous::RestartCause::scale_up;
  r.reason = "node hostc joined";
  CHECK(h.restart(r) ==
        Lines{"say: node hostc joined; restarting the workers in a new round", "join"});
}

TEST_CASE("in a job: stopped by another host's failure", "[agent]") {
  Harness h(config(2));
  h.join();
  h.assign(0, 0, 0);
  rendezvous::Stop s{rendezvous::StopCause::worker_failed,
                     "worker 3 on hostb failed; no restarts left", 9, failure_on("hostb", 3, 9)};
  CHECK(h.stop(s) == Lines{"signal SIGTERM", "grace timer +30s"});
  h.exit(0, killed(SIGTERM));
  CHECK(h.exit(1, killed(SIGTERM)) == Lines{"sweep 30"});
  CHECK(h.ended() ==
        Lines{"summary", "say: worker 3 on hostb failed; no restarts left", "finish 9"});
  CHECK(h.summaries == std::vector<std::string>{"the summary from hostb\n"});
}

TEST_CASE("in a job: this node's own failures are listed after another host's summary", "[agent]") {
  Harness h(config(2));
  h.join();
  h.assign(0, 0, 0);
  CHECK(h.exit(1, code(3), "ValueError: mine", 4000) ==
        Lines{"report failure of rank 1 (local rank 1) on hosta: exit code 3", "signal SIGTERM",
              "grace timer +30s"});
  h.exit(0, killed(SIGTERM));
  // The rendezvous took another host's report first: its summary, then ours.
  rendezvous::Stop s{rendezvous::StopCause::worker_failed, "worker 3 on hostb failed", 9,
                     failure_on("hostb", 3, 9)};
  CHECK(h.stop(s).empty());
  CHECK(h.ended() == Lines{"summary", "summary", "say: worker 3 on hostb failed", "finish 9"});
  REQUIRE(h.summaries.size() == 2);
  CHECK(h.summaries[0] == "the summary from hostb\n");
  CHECK(h.summaries[1].find("rank      : 1 (local_rank: 1)") != std::string::npos);
}

TEST_CASE("in a job: halted, it says what failed; the stop's root cause and list are the job's",
          "[agent]") {
  Harness h(config(2));
  h.join();
  h.assign(0, 0, 0);
  CHECK(h.halt() == Lines{"signal SIGTERM", "grace timer +30s"});
  // Stopped by the halt, a worker leaves an error file dated before the failure that caused it.
  h.exit(1, code(4), "ValueError: mine", 1000);
  h.exit(0, killed(SIGTERM));
  CHECK(h.ended() == Lines{"report ended: 1 failed"});
  rendezvous::WorkerFailure theirs;
  theirs.host = "hostb";
  theirs.rank = 2;
  theirs.local_rank = 0;
  theirs.exit_code = 3;
  theirs.timestamp = 2000;
  theirs.message = "\x1b[2Jtheirs";
  rendezvous::WorkerFailure mine;
  mine.host = "hosta";
  mine.rank = 1;
  mine.local_rank = 1;
  mine.pid = 1001;
  mine.exit_code = 4;
  mine.timestamp = 1000;
  rendezvous::Stop s{rendezvous::StopCause::worker_failed, "worker failed on hosta: rank 1", 4,
                     failure_on("hosta", 1, 4)};
  s.failures = {mine, theirs};
  CHECK(h.stop(s) == Lines{"summary", "say: worker failed on hosta: rank 1", "finish 4"});
  REQUIRE(h.summaries.size() == 1);
  const std::string& text = h.summaries[0];
  const auto root = text.find("Root Cause");
  REQUIRE(root != std::string::npos);
  CHECK(text.find("rank      : 1 (local_rank: 1)", root) != std::string::npos);
  CHECK(text.find("rank      : 2 (local_rank: 0)") < root);
  CHECK(text.find("Traceback ...") != std::string::npos);   // our own, whole
  CHECK(text.find("\\x1b[2Jtheirs") != std::string::npos);  // theirs, escaped
}

TEST_CASE("in a job: a halt after its own failure leaves its later failures counted", "[agent]") {
  Harness h(config(3));
  h.join();
  h.assign(0, 0, 0);
  CHECK(h.exit(0, code(3)) == Lines{"report failure of rank 0 (local rank 0) on hosta: exit code 3",
                                    "signal SIGTERM", "grace timer +30s"});
  // The halt its own failure brought: the group is stopping already.
  CHECK(h.halt().empty());
  // Ended by itself while the group stops, as on one node; the one our SIGTERM ended did not fail.
  h.exit(1, code(4));
  h.exit(2, killed(SIGTERM));
  CHECK(h.ended() == Lines{"report ended: 2 failed"});
}

TEST_CASE("in a job: another node's summary is shown with its control characters escaped",
          "[agent]") {
  Harness h(config(1));
  h.join();
  h.assign(0, 0, 0);
  rendezvous::FailureReport f = failure_on("hostb", 3, 9);
  f.summary = "line one \x1b[2J\nline two \x1b]0;title\x07\n";
  CHECK(h.stop(rendezvous::Stop{rendezvous::StopCause::worker_failed, "failed", 9, f}) ==
        Lines{"signal SIGTERM", "grace timer +30s"});
  h.exit(0, killed(SIGTERM));
  h.ended();
  CHECK(h.summaries ==
        std::vector<std::string>{"line one \\x1b[2J\nline two \\x1b]0;title\\x07\n"});
}

TEST_CASE("in a job: a node that joins after the job ended says so and exits 1", "[agent]") {
  for (auto cause : {rendezvous::StopCause::finished, rendezvous::StopCause::worker_failed}) {
    Harness h(config(1));
    h.join();
    CHECK(h.stop(rendezvous::Stop{cause, "all 2 nodes finished", 0, std::nullopt}) ==
          Lines{"say: the job ended before this node was given work (all 2 nodes finished); it "
                "ran no workers",
                "finish 1"});
  }
}

TEST_CASE("in a job: a stop without a reason or an exit code while idle", "[agent]") {
  Harness h(config(1));
  h.join();
  CHECK(h.stop(rendezvous::Stop{rendezvous::StopCause::server_lost, "", 0, std::nullopt}) ==
        Lines{"say: the job stopped", "finish 1"});
}

TEST_CASE("an entrypoint that cannot be executed ends the job with the shell's status", "[agent]") {
  Harness h(config(1));
  h.start();
  CHECK(h.on(event::StartFailed{"./x: cannot execute: exec format error", 126}) ==
        Lines{"say: ./x: cannot execute: exec format error", "sweep 0"});
  CHECK(h.ended() == Lines{"finish 126"});
}

TEST_CASE("workers that cannot start end the job with 1", "[agent]") {
  SECTION("single node") {
    Harness h(config(2));
    h.start();
    CHECK(h.on(event::StartFailed{"cannot execute /bin/nope: No such file", 1}) ==
          Lines{"say: cannot execute /bin/nope: No such file", "sweep 0"});
    // A worker started before the failure and killed by the supervisor: no failure of its own.
    CHECK(h.exit(0, killed(SIGKILL)).empty());
    CHECK(h.ended() == Lines{"finish 1"});
  }
  SECTION("in a job: the others are told") {
    Harness h(config(2));
    h.join();
    h.assign(0, 0, 0);
    CHECK(h.on(event::StartFailed{"cannot open log file /x: Permission denied", 1}) ==
          Lines{"say: cannot open log file /x: Permission denied",
                "shutdown: cannot open log file /x: Permission denied", "sweep 0"});
    CHECK(h.ended() == Lines{"finish 1"});
  }
}

TEST_CASE("a hang is the attempt's failure: reported, the group stopped, trainrun exits 124",
          "[agent][hang]") {
  Harness h(config(2));
  h.start();
  ProcessFailure hang;
  hang.rank = 1;
  hang.local_rank = 1;
  hang.pid = 1001;
  hang.host = "hosta";
  hang.status = ExitStatus{124, 0};
  hang.timestamp = 4000;
  hang.message = "hung: rank 1 on hosta is in stuck_here() (train.py:41)";
  CHECK(h.on(event::HangConfirmed{{"", {}, hang}}) == Lines{"signal SIGTERM", "grace timer +30s"});
  // The SIGABRT the agent sent for the tracebacks ends them: its stop, no failure of theirs, and
  // the hung rank keeps its one exit code.
  WorkerExit aborted = trainrun::test::worker_exit(0, killed(SIGABRT));
  aborted.aborted = true;
  h.on(event::WorkerExited{aborted});
  aborted = trainrun::test::worker_exit(1, killed(SIGABRT));
  aborted.aborted = true;
  CHECK(h.on(event::WorkerExited{aborted}) == Lines{"sweep 30"});
  CHECK(h.ended() == Lines{"summary", "finish 124"});
  const std::string& summary = h.summaries[0];
  CHECK(summary.find("<NO_OTHER_FAILURES>") != std::string::npos);
  CHECK(summary.find("rank      : 1 (local_rank: 1)") != std::string::npos);
  CHECK(summary.find("rank      : 0") == std::string::npos);
  CHECK(summary.find("exitcode  : -6") == std::string::npos);
  // This node printed the hang's line above its summary: the summary points there.
  CHECK(summary.find("hung: the line \"trainrun: the job is hung\" above says where") !=
        std::string::npos);
  CHECK(summary.find("stuck_here") == std::string::npos);
  // Once the group stops, a late confirmation changes nothing.
  CHECK(h.on(event::HangConfirmed{{"", {}, hang}}).empty());
}

TEST_CASE("a worker that aborts on its own while the group stops still fails", "[agent][hang]") {
  Harness h(config(2));
  h.start();
  h.exit(0, code(3));
  // Not the agent's SIGABRT (a stop by SIGTERM): the worker's own end, listed.
  CHECK(h.exit(1, killed(SIGABRT)) == Lines{"sweep 30"});
  CHECK(h.ended() == Lines{"summary", "finish 3"});
  CHECK(h.summaries[0].find("exitcode  : -6") != std::string::npos);
}

TEST_CASE("in a job, a hang is reported to the rendezvous with its exit code", "[agent][hang]") {
  Harness h(config(2));
  h.join();
  h.assign(1, 2, 0);
  ProcessFailure hang;
  hang.rank = 2;
  hang.host = "hosta";
  hang.status = ExitStatus{124, 0};
  hang.timestamp = 4000;
  CHECK(h.on(event::HangConfirmed{{"", {}, hang}}) ==
        Lines{"report failure of rank 2 (local rank 0) on hosta: exit code 124", "signal SIGTERM",
              "grace timer +30s"});
}

namespace {

rendezvous::Restart scale_up() {
  rendezvous::Restart r;
  r.cause = rendezvous::RestartCause::scale_up;
  r.reason = "a node joined";
  r.restart_count = 1;
  return r;
}

// A state the policy is brought to by events, and the event whose actions a row checks.
struct Row {
  std::string name;
  std::vector<AgentEvent> before;
  AgentEvent event;
  Lines out;
};

const std::string kNoWork =
    "say: the job ended before this node was given work (finished); it ran no workers";
const std::string kStarted =
    "start group 1/2 base 2 local 2 world 4 master hostb:31000 restart 0 of 3";

}  // namespace

// The agent's side doors are gone: what it does on a round formed, a preflight's verdict and a
// lost launcher is the policy's decision, as each row's actions say.
TEST_CASE("rounds, their checks and a lost launcher are the policy's decisions", "[agent]") {
  const AgentEvent in_job = event::StartInJob{};
  const AgentEvent checked = event::RoundFormed{round_of(0, 1)};
  const AgentEvent unchecked = event::RoundFormed{round_of(0, 0)};
  const std::vector<Row> rows = {
      {"a round formed with peers to check: the store closes to the last attempt, the checks run",
       {in_job},
       checked,
       {"store for round: 10.0.0.1 10.0.0.2", "check round: 1 peer(s)"}},
      {"its checks passed: the workers start",
       {in_job, checked},
       event::Assignment{round_of(0, 1)},
       {kStarted}},
      {"a round with nothing to check starts its workers at once",
       {in_job},
       unchecked,
       {"store for round: 10.0.0.1 10.0.0.2", kStarted}},
      {"a round formed while the group runs starts nothing",
       {in_job, unchecked},
       event::RoundFormed{round_of(1, 0)},
       {"store for round: 10.0.0.1 10.0.0.2"}},
      {"a failed check ends the job on every node",
       {in_job, checked},
       event::PreflightFailed{"preflight: hostb cannot reach MASTER_ADDR"},
       {"abort: preflight: hostb cannot reach MASTER_ADDR"}},
      {"a restart while the checks run drops them",
       {in_job, checked},
       event::Restart{scale_up()},
       {"drop checks", "say: a node joined; restarting the workers in a new round", "join"}},
      {"a stop while the checks run drops them",
       {in_job, checked},
       event::Stop{rendezvous::Stop{rendezvous::StopCause::finished, "", 0, std::nullopt}},
       {"drop checks", kNoWork, "finish 1"}},
      {"a halt while the checks run drops them",
       {in_job, checked},
       event::Halt{rendezvous::Halt{0, "a worker failed"}},
       {"drop checks", "report ended: 0 failed"}},
      {"a verdict after the stop drops nothing more",
       {in_job, checked, event::PreflightFailed{"preflight: failed"}},
       event::Stop{rendezvous::Stop{rendezvous::StopCause::finished, "", 0, std::nullopt}},
       {kNoWork, "finish 1"}},
      {"a lost launcher stops the running workers as its stop signal",
       {in_job, unchecked},
       event::LauncherLost{SIGTERM},
       {"say: received SIGTERM; stopping 2 workers (30 s grace before SIGKILL)",
        "shutdown: hosta stopped by SIGTERM", "signal SIGTERM", "grace timer +30s"}},
      {"a lost launcher while waiting for a round leaves the rendezvous",
       {in_job},
       event::LauncherLost{SIGINT},
       {"say: received SIGINT; no worker is running: leaving the rendezvous",
        "shutdown: hosta stopped by SIGINT", "finish 130"}},
      {"a lost launcher after the end changes nothing",
       {in_job, event::Signal{SIGINT}},
       event::LauncherLost{SIGTERM},
       {}},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    Harness h(config(2));
    for (const AgentEvent& e : row.before) h.on(e);
    CHECK(h.on(row.event) == row.out);
  }
}

namespace {
// Whether the first SIGTERM stop among `actions` is a failure's (SIGABRT first to a quiet group).
std::optional<bool> failure_stop(const AgentActions& actions) {
  for (const AgentAction& a : actions)
    if (const auto* s = std::get_if<action::SignalWorkers>(&a); s && s->signal == SIGTERM)
      return s->failure_stop;
  return std::nullopt;
}
}  // namespace

TEST_CASE("a stop is a failure's until a signal reaches trainrun or its launcher is lost",
          "[agent][hang]") {
  const auto now = AgentPolicy::Clock::time_point{};
  const auto failed = event::WorkerExited{trainrun::test::worker_exit(0, code(1), "", 0)};
  {
    AgentPolicy p(config(2), "hosta");
    p.handle(event::StartSingleNode{29500}, now);
    CHECK(failure_stop(p.handle(failed, now)) == true);
  }
  {
    AgentPolicy p(config(2), "hosta");
    p.handle(event::StartSingleNode{29500}, now);
    p.handle(event::Signal{SIGUSR1}, now);  // passed on; a stop later is no failure's
    CHECK(failure_stop(p.handle(failed, now)) == false);
  }
  {
    AgentPolicy p(config(2), "hosta");
    p.handle(event::StartSingleNode{29500}, now);
    CHECK(failure_stop(p.handle(event::LauncherLost{SIGTERM}, now)) == false);
  }
  {
    AgentPolicy p(config(2), "hosta");
    p.handle(event::StartInJob{}, now);
    p.handle(event::Assignment{round_of(0, 0)}, now);
    CHECK(failure_stop(p.handle(event::Restart{scale_up()}, now)) == true);
  }
}
