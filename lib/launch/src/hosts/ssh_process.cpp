#include "ssh_process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainrun/base/process.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

SshProcess start_ssh(const std::vector<std::string>& argv, const std::string& handover) {
  // Standard error is a pipe of our own: a program that cannot run is said there, as a shell
  // would say it, by us once the child has reported why.
  int err[2];
  if (!make_pipe(err))
    throw SetupError(fmt::format("cannot make pipes for ssh: {}", std::strerror(errno)));
  SpawnRequest request;
  request.program = argv.empty() ? std::string() : argv[0];
  request.search_path = true;
  request.argv = argv;
  request.in = Stdio::pipe();
  request.out = Stdio::pipe();
  request.err = Stdio::from_fd(err[1]);
  request.group = SpawnRequest::Group::new_group;
  request.default_signals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE};
  Child child = spawn(request);
  if (child.pid < 0) {
    ::close(err[0]);
    ::close(err[1]);
    const char* what = child.pipe_failed ? "cannot make pipes for ssh" : "cannot start ssh";
    throw SetupError(fmt::format("{}: {}", what, std::strerror(child.error)));
  }
  if (const int exec_errno = wait_for_exec(child)) {
    const std::string why =
        fmt::format("cannot run {}: {}\n", request.program, std::strerror(exec_errno));
    write_all(err[1], why.data(), why.size());
  }
  ::close(err[1]);
  SshProcess p;
  p.pid = child.pid;
  p.in = child.in;
  p.out = child.out;
  p.err = err[0];
  ::fcntl(p.out, F_SETFL, O_NONBLOCK);
  ::fcntl(p.err, F_SETFL, O_NONBLOCK);
  write_all(p.in, handover.data(), handover.size());
  // Heartbeats after it never block the launcher on an ssh that stopped reading.
  ::fcntl(p.in, F_SETFL, O_NONBLOCK);
  return p;
}

}  // namespace trainrun::launch
