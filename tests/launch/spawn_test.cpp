#include "workers/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <string>

using namespace trainrun;
using namespace trainrun::launch;

TEST_CASE("a spawned worker leads its own session and group, with its environment and its stdout",
          "[spawn]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  Child s = spawn(worker_spawn_request("/bin/sh", {"sh", "-c", "echo \"$GREETING\"; exit 3"},
                                       {"GREETING=hello"}, p[1], -1, -1));
  ::close(p[1]);
  REQUIRE(s.pid > 0);
  CHECK(wait_for_exec(s) == 0);
  // Past its exec, so past its setsid; not reaped yet: a zombie keeps its group and session.
  CHECK(::getpgid(s.pid) == s.pid);
  CHECK(::getsid(s.pid) == s.pid);
  CHECK(s.exec_report == -1);
  char buf[16] = {};
  CHECK(::read(p[0], buf, sizeof buf) == 6);
  CHECK(std::string(buf) == "hello\n");
  ::close(p[0]);
  const auto status = wait_for_exit(s.pid);
  REQUIRE(status);
  CHECK(status->code == 3);
}

TEST_CASE("a worker whose program cannot be executed reports the errno", "[spawn]") {
  Child s = spawn(worker_spawn_request("/nonexistent/program", {"program"}, {}, -1, -1, -1));
  REQUIRE(s.pid > 0);
  CHECK(wait_for_exec(s) == ENOENT);
  const auto status = wait_for_exit(s.pid);
  REQUIRE(status);
  CHECK(status->code == 127);
}

TEST_CASE("a worker is described as a session leader killed with its launcher, SIGPIPE reset",
          "[spawn]") {
  const SpawnRequest r =
      worker_spawn_request("/bin/true", {"true"}, {"A=1"}, 5, 6, 7, std::set<int>{0, 1});
  CHECK(r.group == SpawnRequest::Group::new_session);
  CHECK(r.death_signal == SIGKILL);
  CHECK(r.default_signals == std::vector<int>{SIGPIPE});
  CHECK(r.out.kind == Stdio::Kind::fd);
  CHECK(r.out.fd == 5);
  CHECK(r.err.fd == 6);
  CHECK(r.in.kind == Stdio::Kind::inherit);
  CHECK(r.cgroup_fd == 7);
  CHECK(r.cpus == std::set<int>{0, 1});
  CHECK(r.env == std::optional<std::vector<std::string>>({"A=1"}));
  CHECK_FALSE(r.search_path);
}
