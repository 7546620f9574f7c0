#include "hosts/ssh_process.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "trainrun/base/process.hpp"

using namespace trainrun::launch;

namespace {

// Everything `fd` gives until its end (it is non-blocking: waits with poll).
std::string read_to_end(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, -1);
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// start_ssh writes the handover to ssh's standard input, which an ssh that did not start has
// closed: as in trainrun (run_agent, HostsLauncher), that is EPIPE, not SIGPIPE's death.
const bool kSigpipeIgnored = ::signal(SIGPIPE, SIG_IGN) != SIG_ERR;

int wait_for(pid_t pid) {
  const auto status = trainrun::wait_for_exit(pid);
  return status ? status->shell_code() : -1;
}

}  // namespace

TEST_CASE("ssh starts in a group of its own with the handover on its standard input", "[hosts]") {
  REQUIRE(kSigpipeIgnored);
  const SshProcess p = start_ssh(
      {"/bin/sh", "-c", "read line; echo \"got $line\"; ps -o pgid= -p $$ | tr -d ' ' >&2"},
      "handover-line\n");
  ::close(p.in);
  CHECK(read_to_end(p.out) == "got handover-line\n");
  CHECK(read_to_end(p.err) == std::to_string(p.pid) + "\n");
  CHECK(wait_for(p.pid) == 0);
}

TEST_CASE("an ssh that cannot run exits 127 and says why", "[hosts]") {
  REQUIRE(kSigpipeIgnored);
  const SshProcess p = start_ssh({"/nonexistent/ssh", "host"}, "x\n");
  ::close(p.in);
  CHECK(read_to_end(p.out).empty());
  CHECK(read_to_end(p.err).rfind("cannot run /nonexistent/ssh: No such file or directory", 0) == 0);
  CHECK(wait_for(p.pid) == 127);
}
