#include "trainrun/launch/workers/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>

#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/workers/descriptors.hpp"

namespace trainrun::launch {

namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(pid_t parent, const char* program, char** argv, char** envp,
                             int out_fd, int err_fd, int report_fd, int cgroup_fd,
                             const cpu_set_t* cpus) {
  // A session of its own, as torchrun's start_new_session=True: the worker leads a process group
  // (one signal stops what it starts) outside the launcher's terminal job control, so reading the
  // terminal (input(), breakpoint()) does not stop it with SIGTTIN.
  setsid();
  // Inherited by the program and every thread it starts, as numactl --physcpubind would set it.
  if (cpus) sched_setaffinity(0, sizeof(cpu_set_t), cpus);
  // Into the job's cgroup before anything of the worker runs; without it, the process group,
  // the subreaper and the job marker still reach what it starts.
  if (cgroup_fd >= 0) {
    ssize_t ignored = write(cgroup_fd, "0", 1);
    (void)ignored;
  }
  restore_descriptor_limit();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (out_fd >= 0 && dup2(out_fd, 1) < 0) _exit(127);
  if (err_fd >= 0 && dup2(err_fd, 2) < 0) _exit(127);
  execve(program, argv, envp);
  int err = errno;
  ssize_t ignored = write(report_fd, &err, sizeof err);
  (void)ignored;
  _exit(127);
}

}  // namespace

Spawned spawn_worker(const std::string& program, const std::vector<std::string>& argv,
                     const std::vector<std::string>& envp, int out_fd, int err_fd, int cgroup_fd,
                     const std::set<int>& cpus) {
  // Built before the fork: the child may not allocate.
  auto c_argv = c_strings(argv);
  auto c_envp = c_strings(envp);
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpu_set);
  const pid_t parent = getpid();
  Spawned s;
  int report[2] = {-1, -1};
  if (pipe2(report, O_CLOEXEC) != 0) {
    s.error = errno;
    return s;
  }
  s.pid = fork();
  if (s.pid == 0)
    exec_child(parent, program.c_str(), c_argv.data(), c_envp.data(), out_fd, err_fd, report[1],
               cgroup_fd, cpus.empty() ? nullptr : &cpu_set);
  s.error = errno;
  ::close(report[1]);
  if (s.pid < 0) {
    ::close(report[0]);
    return s;
  }
  // No setpgid here: a child already made a group leader could not call setsid. Until the child's
  // setsid, signal_all reaches it by its pid; wait_for_exec returns only after it.
  s.exec_report = report[0];
  return s;
}

int wait_for_exec(Spawned& spawned) {
  int exec_errno = 0;
  const bool failed = read_exactly(spawned.exec_report, &exec_errno, sizeof exec_errno);
  ::close(spawned.exec_report);
  spawned.exec_report = -1;
  return failed ? exec_errno : 0;
}

}  // namespace trainrun::launch
