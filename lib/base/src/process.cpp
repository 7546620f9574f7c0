#include "trainrun/base/process.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "trainrun/base/reaper.hpp"
#include "trainrun/base/system.hpp"

extern char** environ;

namespace trainrun {

ExitStatus ExitStatus::from_wait(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status))
    s.signal = WTERMSIG(status);
  else if (WIFEXITED(status))
    s.code = WEXITSTATUS(status);
  return s;
}

WaitEvent WaitEvent::from_wait(int status) {
  WaitEvent e;
  if (WIFSTOPPED(status)) {
    e.kind = Kind::stopped;
    e.stop_signal = WSTOPSIG(status);
  } else if (WIFCONTINUED(status)) {
    e.kind = Kind::continued;
  } else {
    e.end = ExitStatus::from_wait(status);
  }
  return e;
}

std::string signal_name(int signal) {
  static const std::pair<int, const char*> names[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [n, name] : names)
    if (n == signal) return name;
  return "SIG" + std::to_string(signal);
}

std::string describe_exit(const ExitStatus& status) {
  if (status.signal != 0) return "was killed by " + signal_name(status.signal);
  return "exited with code " + std::to_string(status.code);
}

std::vector<int> all_signals() {
  std::vector<int> out;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) out.push_back(sig);
  return out;
}

bool make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    if (fds[i] > 2) continue;
    const int high = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
    const int err = errno;
    ::close(fds[i]);
    fds[i] = high;
    errno = err;
  }
  if (fds[0] >= 0 && fds[1] >= 0) return true;
  const int err = errno;
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) ::close(fds[i]);
  errno = err;
  return false;
}

namespace {

// Where `name` may be on `path` (colon-separated), in the order execvp tries: an empty entry is
// the current directory.
std::vector<std::string> path_candidates(const std::string& name, const std::string& path) {
  std::vector<std::string> candidates;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == start ? "." : path.substr(start, end - start);
    candidates.push_back(dir + "/" + name);
    start = end + 1;
  }
  return candidates;
}

}  // namespace

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::optional<std::string> find_program(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return name;
  for (const std::string& candidate : path_candidates(name, path))
    if (is_executable_file(candidate)) return candidate;
  return std::nullopt;
}

namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Where execvp would find `name`, decided before the fork; the errno it would fail with when
// nowhere: EACCES when some candidate exists but cannot be run, else ENOENT.
int resolve_on_path(const std::string& name, std::string& resolved) {
  if (name.empty()) return ENOENT;
  const char* path = std::getenv("PATH");
  // glibc's execvp searches this when PATH is unset.
  const std::string search = path ? path : "/bin:/usr/bin";
  if (auto found = find_program(name, search)) {
    resolved = *found;
    return 0;
  }
  for (const std::string& candidate : path_candidates(name, search))
    if (::access(candidate.c_str(), F_OK) == 0) return EACCES;
  return ENOENT;
}

// What the child needs, every array built before the fork.
struct Prepared {
  const SpawnRequest* request = nullptr;
  const char* program = nullptr;
  int resolve_error = 0;  // the program was not found on PATH
  char** argv = nullptr;
  char** envp = nullptr;
  // With a PATH search: the program run by /bin/sh, as execvp runs a file with no #! line.
  char** script_argv = nullptr;
  const cpu_set_t* cpus = nullptr;
  pid_t parent = -1;
  int report = -1;                // the exec report's write end
  int streams[3] = {-1, -1, -1};  // what becomes 0, 1 and 2; -1: ours
  bool null_stream[3] = {false, false, false};
  bool made_in_cgroup = false;  // set before the child is made: it is in request->cgroup_fd's
};

// fork(), or with a cgroup a raw clone3 that makes the child in it (CLONE_INTO_CGROUP), setting
// `made_in_cgroup` first, so the child's copy says so; where the kernel refuses (before 5.7, a
// cgroup v1, a seccomp filter), fork() and the child moves itself. The child of a raw clone3
// runs no fork handler, which the child here never needs: it only makes system calls until exec.
pid_t fork_into(int cgroup_fd, bool& made_in_cgroup) {
#if defined(SYS_clone3) && defined(CLONE_INTO_CGROUP)
  if (cgroup_fd >= 0) {
    clone_args args{};
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<std::uint64_t>(cgroup_fd);
    made_in_cgroup = true;
    const long pid = ::syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0) return static_cast<pid_t>(pid);
    made_in_cgroup = false;
  }
#else
  (void)cgroup_fd;
#endif
  return ::fork();
}

// close_range(2)'s flag (Linux 5.11), and its number where the C library's headers are older
// than the kernel's call (the same on every architecture).
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
constexpr unsigned kCloseRangeCloexec = 1U << 2;

// Marks every descriptor above 2 close-on-exec: with one call where the kernel has it, else one
// call per possible descriptor (up to the soft limit).
void close_on_exec_above_2() {
  if (::syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec) == 0) return;
  rlimit limit{};
  const rlim_t last =
      ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? limit.rlim_cur
                                                                                  : 65536;
  for (rlim_t fd = 3; fd < last; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
}

// Every signal blocked in the calling thread while it forks, its mask back when it goes. The child
// starts with them all blocked and puts every handler back to SIG_DFL (default_handlers) before it
// unblocks any: a signal sent to it before then (its group stopped right after the fork) waits
// and then acts as on any program, instead of running the parent's handler in the child, which
// writes into the parent's self-pipe, so that the parent took the child's SIGTERM for its own.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &old_);
  }
  ~SignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;
  const sigset_t& old() const { return old_; }

 private:
  sigset_t old_{};
};

// In the child, with every signal blocked: each signal the parent handles goes back to SIG_DFL
// (an ignored one stays ignored, as across any exec).
void default_handlers() {
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    if (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
}

[[noreturn]] void fail_in_child(int report, int err) {
  ssize_t ignored = ::write(report, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only, nothing allocated.
[[noreturn]] void start_in_child(const Prepared& p) {
  const SpawnRequest& r = *p.request;
  default_handlers();
  if (r.group == SpawnRequest::Group::new_session)
    ::setsid();
  else if (r.group == SpawnRequest::Group::new_group)
    ::setpgid(0, 0);
  // Inherited by the program and every thread it starts, as numactl --physcpubind would set it.
  if (p.cpus) ::sched_setaffinity(0, sizeof(cpu_set_t), p.cpus);
  // Into the cgroup before anything of the program runs, unless it was made there.
  if (r.cgroup_fd >= 0 && !p.made_in_cgroup) {
    const int procs = ::openat(r.cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (procs >= 0) {
      ssize_t ignored = ::write(procs, "0", 1);
      (void)ignored;
      ::close(procs);
    }
  }
  if (r.descriptor_limit) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      limit.rlim_cur = static_cast<rlim_t>(*r.descriptor_limit);
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
  }
  if (r.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, r.death_signal);
    if (::getppid() != p.parent) ::_exit(127);  // the parent died before prctl took effect
  }
  if (r.ptracer != 0) ::prctl(PR_SET_PTRACER, r.ptracer);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : r.default_signals) ::sigaction(sig, &dfl, nullptr);
  // Each source moved above 2 first: one stream's source may be another's number (or its own,
  // whose close-on-exec flag a dup2 onto itself would keep).
  int sources[3];
  for (int i = 0; i < 3; ++i) {
    sources[i] = p.streams[i];
    if (p.null_stream[i]) {
      sources[i] = ::open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
      if (sources[i] < 0) fail_in_child(p.report, errno);
    }
    if (sources[i] >= 0 && sources[i] <= 2) {
      sources[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, 3);
      if (sources[i] < 0) fail_in_child(p.report, errno);
    }
  }
  for (int i = 0; i < 3; ++i)
    if (sources[i] >= 0 && ::dup2(sources[i], i) < 0) fail_in_child(p.report, errno);
  if (r.close_inherited) close_on_exec_above_2();
  if (r.kept_fd > 2 && ::fcntl(r.kept_fd, F_SETFD, 0) != 0) fail_in_child(p.report, errno);
  if (!r.cwd.empty() && ::chdir(r.cwd.c_str()) != 0) fail_in_child(p.report, errno);
  if (p.resolve_error != 0) fail_in_child(p.report, p.resolve_error);
  ::execve(p.program, p.argv, p.envp);
  if (errno == ENOEXEC && p.script_argv) ::execve("/bin/sh", p.script_argv, p.envp);
  fail_in_child(p.report, errno);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Child spawn(const SpawnRequest& request) {
  Child c;
  // Built before the fork: the child may not allocate.
  std::string resolved = request.program;
  Prepared p;
  p.request = &request;
  if (request.search_path && request.program.find('/') == std::string::npos)
    p.resolve_error = resolve_on_path(request.program, resolved);
  p.program = resolved.c_str();
  auto argv = c_strings(request.argv);
  std::vector<char*> envp;
  if (request.env) envp = c_strings(*request.env);
  p.argv = argv.data();
  std::vector<char*> script_argv;
  if (request.search_path) {
    script_argv = {const_cast<char*>("/bin/sh"), const_cast<char*>(p.program)};
    for (std::size_t i = 1; i < request.argv.size(); ++i) script_argv.push_back(argv[i]);
    script_argv.push_back(nullptr);
    p.script_argv = script_argv.data();
  }
  p.envp = request.env ? envp.data() : environ;
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int cpu : request.cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpu_set);
  if (!request.cpus.empty()) p.cpus = &cpu_set;
  p.parent = ::getpid();

  int report[2] = {-1, -1};
  // The child's ends of its pipes, closed here once it has them.
  int child_ends[3] = {-1, -1, -1};
  int* ours[3] = {&c.in, &c.out, &c.err};
  auto close_all = [&] {
    const int err = errno;
    close_fd(report[0]);
    close_fd(report[1]);
    for (int i = 0; i < 3; ++i) {
      close_fd(child_ends[i]);
      close_fd(*ours[i]);
    }
    errno = err;
  };
  if (!make_pipe(report)) {
    c.error = errno;
    c.pipe_failed = true;
    return c;
  }
  p.report = report[1];
  const Stdio* streams[3] = {&request.in, &request.out, &request.err};
  for (int i = 0; i < 3; ++i) {
    switch (streams[i]->kind) {
      case Stdio::Kind::inherit:
        break;
      case Stdio::Kind::fd:
        p.streams[i] = streams[i]->fd;
        break;
      case Stdio::Kind::null:
        p.null_stream[i] = true;
        break;
      case Stdio::Kind::pipe: {
        int fds[2];
        if (!make_pipe(fds)) {
          c.error = errno;
          c.pipe_failed = true;
          close_all();
          return c;
        }
        // Standard input reads from the pipe; output and error write into it.
        child_ends[i] = i == 0 ? fds[0] : fds[1];
        *ours[i] = i == 0 ? fds[1] : fds[0];
        p.streams[i] = child_ends[i];
        break;
      }
    }
  }
  {
    // Registered before any collection can see it: the reaper's (reaper.hpp).
    const auto lock = reaper::fork_lock();
    const SignalsHeld held;
    c.pid = fork_into(request.cgroup_fd, p.made_in_cgroup);
    if (c.pid == 0) start_in_child(p);
    reaper::started(lock, c.pid);
  }
  if (c.pid < 0) {
    c.error = errno;
    close_all();
    return c;
  }
  close_fd(report[1]);
  for (int& fd : child_ends) close_fd(fd);
  c.exec_report = report[0];
  return c;
}

int wait_for_exec(Child& child) {
  int exec_errno = 0;
  const bool failed = read_exactly(child.exec_report, &exec_errno, sizeof exec_errno);
  close_fd(child.exec_report);
  return failed ? exec_errno : 0;
}

pid_t run_in_child(int (*body)(void*), void* arg) {
  auto lock = reaper::fork_lock();
  pid_t pid = -1;
  {
    const SignalsHeld held;
    pid = ::fork();
    if (pid == 0) {
      default_handlers();
      ::pthread_sigmask(SIG_SETMASK, &held.old(), nullptr);
      reaper::forked(lock);
      ::_exit(body(arg));
    }
  }
  reaper::started(lock, pid);
  return pid;
}

}  // namespace trainrun
