// The one reaper (lib/base/reaper.hpp) with real children: each child's events go to whoever
// started it, whatever the thread that collects.
#include "trainrun/base/reaper.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "trainrun/base/process.hpp"

using namespace trainrun;

namespace {

pid_t sh(const std::string& script) {
  SpawnRequest r;
  r.program = "/bin/sh";
  r.argv = {"sh", "-c", script};
  Child c = spawn(r);
  REQUIRE(c.pid > 0);
  REQUIRE(wait_for_exec(c) == 0);
  return c.pid;
}

struct Events {
  std::vector<std::pair<pid_t, WaitEvent>> got;
  reaper::Handler handler() {
    return [this](pid_t pid, const WaitEvent& e) { got.emplace_back(pid, e); };
  }
  // Collects until `n` events came (10 s at most).
  void collect_until(std::size_t n) {
    for (int i = 0; i < 1000 && got.size() < n; ++i) {
      reaper::collect();
      if (got.size() < n) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(got.size() >= n);
  }
};

}  // namespace

TEST_CASE("an adopted child's end goes to its handler once", "[reaper]") {
  Events events;
  const pid_t pid = sh("exit 3");
  reaper::adopt(pid, events.handler());
  events.collect_until(1);
  REQUIRE(events.got.size() == 1);
  CHECK(events.got[0].first == pid);
  CHECK(events.got[0].second.kind == WaitEvent::Kind::ended);
  CHECK(events.got[0].second.end.code == 3);
  reaper::collect();
  CHECK(events.got.size() == 1);
}

TEST_CASE("an adopted child's stop and continuation come before its end", "[reaper]") {
  Events events;
  const pid_t pid = sh("exec sleep 30");  // exec: no orphaned sleep holding our output open
  reaper::adopt(pid, events.handler());
  ::kill(pid, SIGSTOP);
  events.collect_until(1);
  CHECK(events.got[0].second.kind == WaitEvent::Kind::stopped);
  CHECK(events.got[0].second.stop_signal == SIGSTOP);
  ::kill(pid, SIGCONT);
  events.collect_until(2);
  CHECK(events.got[1].second.kind == WaitEvent::Kind::continued);
  ::kill(pid, SIGKILL);
  events.collect_until(3);
  CHECK(events.got[2].second.kind == WaitEvent::Kind::ended);
  CHECK(events.got[2].second.end.signal == SIGKILL);
}

TEST_CASE("a child its starter waits for is never taken by another thread's collection",
          "[reaper]") {
  Events orphans;
  reaper::set_orphans(orphans.handler());
  std::atomic<bool> done{false};
  // Another thread collects as the agent's loop does on SIGCHLD, all the while.
  std::thread collector([&] {
    while (!done) {
      reaper::collect();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const pid_t pid = sh("sleep 0.3; exit 5");
  CHECK(reaper::has_ended(pid) == false);
  const auto status = wait_for_exit(pid);
  done = true;
  collector.join();
  reaper::set_orphans(nullptr);
  REQUIRE(status);
  CHECK(status->code == 5);
  CHECK(orphans.got.empty());
  // Polled the same way (the stack tools do): running, then its end, then gone.
  const pid_t polled = sh("sleep 0.2; exit 6");
  CHECK(reaper::try_reap(polled).state == reaper::Reaped::State::running);
  reaper::Reaped r;
  for (int i = 0;
       i < 1000 && (r = reaper::try_reap(polled)).state == reaper::Reaped::State::running; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(r.state == reaper::Reaped::State::ended);
  CHECK(r.status.code == 6);
  CHECK(reaper::try_reap(polled).state == reaper::Reaped::State::gone);
}

TEST_CASE("a child nobody started goes to the orphans' handler", "[reaper]") {
  Events orphans;
  reaper::set_orphans(orphans.handler());
  // As an orphan comes back to a child subreaper: a child of ours no one registered.
  const pid_t stranger = ::fork();
  if (stranger == 0) ::_exit(7);
  REQUIRE(stranger > 0);
  CHECK(reaper::has_children());
  orphans.collect_until(1);
  reaper::set_orphans(nullptr);
  CHECK(orphans.got[0].first == stranger);
  CHECK(orphans.got[0].second.end.code == 7);
  CHECK_FALSE(reaper::has_children());
}
