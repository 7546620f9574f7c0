#include "trainrun/launch/hosts/ssh_process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

SshProcess start_ssh(const std::vector<std::string>& argv, const std::string& handover) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw SetupError(fmt::format("cannot make pipes for ssh: {}", std::strerror(errno)));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw SetupError(fmt::format("cannot start ssh: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE})
      ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(args[0], args.data());
    const std::string why = fmt::format("cannot run {}: {}\n", argv[0], std::strerror(errno));
    (void)!::write(2, why.data(), why.size());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  SshProcess p;
  p.pid = pid;
  p.in = in[1];
  p.out = out[0];
  p.err = err[0];
  ::fcntl(p.out, F_SETFL, O_NONBLOCK);
  ::fcntl(p.err, F_SETFL, O_NONBLOCK);
  write_all(p.in, handover.data(), handover.size());
  // Heartbeats after it never block the launcher on an ssh that stopped reading.
  ::fcntl(p.in, F_SETFL, O_NONBLOCK);
  return p;
}

}  // namespace trainrun::launch
