#include "agent/stop_orders.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "worker_exit.hpp"

using namespace trainrun::launch;
using trainrun::ExitStatus;
using trainrun::test::worker_exit;
namespace rendezvous = trainrun::rendezvous;

namespace {

// Each action by its kind, in order.
std::vector<std::string> kinds(const AgentActions& actions) {
  static const char* const names[] = {
      "start", "signal",      "grace",          "sweep",        "join",        "store",
      "check", "drop checks", "report failure", "report ended", "report done", "shutdown",
      "abort", "say",         "summary",        "finish"};
  static_assert(std::variant_size_v<AgentAction> == std::size(names));
  std::vector<std::string> out;
  for (const auto& a : actions) out.push_back(names[a.index()]);
  return out;
}

const ExitStatus kCode3{3, 0};
const ExitStatus kTerm{0, SIGTERM};
const ExitStatus kKill{0, SIGKILL};
const ExitStatus kSegv{0, SIGSEGV};

}  // namespace

TEST_CASE("without an order, every failed exit counts while the group runs", "[agent]") {
  StopOrders orders;
  CHECK(orders.counts_as_failure(kCode3, true, false));
  CHECK(orders.counts_as_failure(kTerm, true, false));
  // Stopping for its own failure: what our SIGTERM or SIGKILL ended did not fail.
  CHECK(orders.counts_as_failure(kCode3, false, true));
  CHECK(orders.counts_as_failure(kSegv, false, true));
  CHECK_FALSE(orders.counts_as_failure(kTerm, false, true));
  CHECK_FALSE(orders.counts_as_failure(kKill, false, true));
}

TEST_CASE("a halt leaves a node stopping for its own failure counting as before", "[agent]") {
  StopOrders orders;
  orders.on_halt();
  CHECK(orders.counts_as_failure(kCode3, false, true));
  CHECK(orders.counts_as_failure(kSegv, false, true));
  CHECK_FALSE(orders.counts_as_failure(kTerm, false, true));
  CHECK_FALSE(orders.counts_as_failure(kKill, false, true));
  // Halted for another node's failure alone: nothing this node's workers do while stopping counts.
  CHECK_FALSE(orders.counts_as_failure(kCode3, false, false));
}

TEST_CASE("no failed exit counts while the rendezvous stops the group", "[agent]") {
  // A new round, a halt: each holds until the next attempt.
  for (void (StopOrders::*order)() : {&StopOrders::on_restart, &StopOrders::on_halt}) {
    StopOrders orders;
    (orders.*order)();
    CHECK_FALSE(orders.counts_as_failure(kCode3, true, false));
    CHECK_FALSE(orders.counts_as_failure(kSegv, false, false));
    orders.new_attempt();
    CHECK(orders.counts_as_failure(kSegv, false, true));
  }
  SECTION("the job's end, which a new attempt does not clear") {
    StopOrders orders;
    orders.on_stop(rendezvous::Stop{});
    orders.new_attempt();
    CHECK(orders.stopped());
    CHECK_FALSE(orders.counts_as_failure(kCode3, true, true));
  }
}

TEST_CASE("a stop signal is kept until the next attempt", "[agent]") {
  StopOrders orders;
  CHECK(orders.signal() == 0);
  orders.on_signal(SIGINT);
  CHECK(orders.signal() == SIGINT);
  // The user's stop is not the rendezvous': the workers' own failures still count.
  CHECK(orders.counts_as_failure(kCode3, false, true));
  orders.new_attempt();
  CHECK(orders.signal() == 0);
}

TEST_CASE("what follows an attempt in a job", "[agent]") {
  AttemptFailures failures("train.py", "hosta");
  AgentActions out;
  SECTION("all succeeded: the exit barrier") {
    StopOrders orders;
    CHECK_FALSE(orders.after_attempt_in_job(out, failures, true));
    CHECK(kinds(out) == std::vector<std::string>{"report done"});
  }
  SECTION("failed: the decision is the rendezvous', on its way") {
    StopOrders orders;
    failures.record(worker_exit(0, kCode3), 0, true);
    CHECK_FALSE(orders.after_attempt_in_job(out, failures, true));
    CHECK(out.empty());
  }
  SECTION("a new round: join it, once") {
    StopOrders orders;
    orders.on_restart();
    CHECK_FALSE(orders.after_attempt_in_job(out, failures, true));
    CHECK(kinds(out) == std::vector<std::string>{"join"});
    out.clear();
    CHECK_FALSE(orders.after_attempt_in_job(out, failures, true));
    CHECK(kinds(out) == std::vector<std::string>{"report done"});
  }
  SECTION("a halt: tell the rendezvous what failed, perhaps nothing") {
    StopOrders orders;
    orders.on_halt();
    CHECK_FALSE(orders.after_attempt_in_job(out, failures, true));
    CHECK(kinds(out) == std::vector<std::string>{"report ended"});
  }
  SECTION("the job's end: the node's exit status") {
    StopOrders orders;
    orders.on_restart();
    orders.on_stop(rendezvous::Stop{rendezvous::StopCause::finished, "", 0, std::nullopt});
    CHECK(orders.after_attempt_in_job(out, failures, true) == 0);
    CHECK(out.empty());
    rendezvous::Stop lost{rendezvous::StopCause::server_lost, "the rendezvous is gone", 1,
                          std::nullopt};
    orders.on_stop(lost);
    CHECK(orders.after_attempt_in_job(out, failures, true) == 1);
    CHECK(kinds(out) == std::vector<std::string>{"say"});
  }
}
