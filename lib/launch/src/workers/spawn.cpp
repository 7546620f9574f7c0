#include "spawn.hpp"

#include <signal.h>
#include <unistd.h>

#include "trainrun/launch/workers/descriptors.hpp"

namespace trainrun::launch {

SpawnRequest worker_spawn_request(const std::string& program, const std::vector<std::string>& argv,
                                  const std::vector<std::string>& envp, int out_fd, int err_fd,
                                  int cgroup_fd, const std::set<int>& cpus) {
  SpawnRequest r;
  r.program = program;
  r.argv = argv;
  r.env = envp;
  r.out = Stdio::from_fd(out_fd);
  r.err = Stdio::from_fd(err_fd);
  // A session of its own, as torchrun's start_new_session=True: the worker leads a process group
  // (one signal stops what it starts) outside the launcher's terminal job control, so reading the
  // terminal (input(), breakpoint()) does not stop it with SIGTTIN.
  r.group = SpawnRequest::Group::new_session;
  // The launcher ignores SIGPIPE; the worker gets it back, as from a shell.
  r.default_signals = {SIGPIPE};
  r.death_signal = SIGKILL;
  // Into the job's cgroup before anything of the worker runs; without it, the process group,
  // the subreaper and the job marker still reach what it starts.
  r.cgroup_fd = cgroup_fd;
  r.cpus = cpus;
  r.descriptor_limit = original_descriptor_limit();
  // torchrun's workers get 0, 1 and 2 (subprocess' close_fds): nothing trainrun inherited.
  r.close_inherited = true;
  // Under Yama's ptrace_scope=1 (Ubuntu's default) only an ancestor may attach: the stack tools
  // the agent starts for --stacks and a hang are its children, not the worker's ancestors.
  r.ptracer = ::getpid();
  return r;
}

}  // namespace trainrun::launch
