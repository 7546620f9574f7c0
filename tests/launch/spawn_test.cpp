#include "trainrun/launch/workers/spawn.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <string>

using namespace trainrun::launch;

namespace {

int wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

TEST_CASE("a spawned worker leads its own session and group, with its environment and its stdout",
          "[spawn]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  Spawned s = spawn_worker("/bin/sh", {"sh", "-c", "echo \"$GREETING\"; exit 3"},
                           {"GREETING=hello"}, p[1], -1, -1);
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
  const int status = wait_status(s.pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
}

TEST_CASE("a worker whose program cannot be executed reports the errno", "[spawn]") {
  Spawned s = spawn_worker("/nonexistent/program", {"program"}, {}, -1, -1, -1);
  REQUIRE(s.pid > 0);
  CHECK(wait_for_exec(s) == ENOENT);
  const int status = wait_status(s.pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 127);
}
