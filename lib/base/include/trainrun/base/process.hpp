#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

// The one place trainrun starts processes and decodes how they ended: the workers, the agents'
// ssh (--hosts), the stack tools and the watchdog all go through it.
namespace trainrun {

// The shell's exit status for a process that signal `signal` killed: 128 + N.
constexpr int shell_code_for_signal(int signal) { return 128 + signal; }

// How a process ended, as waitpid reported it.
struct ExitStatus {
  int code = 0;    // exit code when exited normally
  int signal = 0;  // terminating signal, 0 when it exited
  bool failed() const { return signal != 0 || code != 0; }
  // The shell's convention: the exit code, or 128+N for death by signal N.
  int shell_code() const { return signal != 0 ? shell_code_for_signal(signal) : code; }
  // A status waitpid gave for a process that ended (not one stopped or continued).
  static ExitStatus from_wait(int status);
};

// What a status waitpid gave with WUNTRACED | WCONTINUED says: the process ended (`end`), was
// stopped (by `stop_signal`), or was continued.
struct WaitEvent {
  enum class Kind { ended, stopped, continued };
  Kind kind = Kind::ended;
  ExitStatus end;
  int stop_signal = 0;
  static WaitEvent from_wait(int status);
};

// "SIGKILL" for 9, "SIG42" for numbers without a name here.
std::string signal_name(int signal);

// How a process ended, as a sentence's end: "exited with code 3", "was killed by SIGKILL".
std::string describe_exit(const ExitStatus& status);

// Where one of a child's standard streams (0, 1, 2) comes from.
struct Stdio {
  enum class Kind { inherit, fd, null, pipe };
  Kind kind = Kind::inherit;
  int fd = -1;  // with Kind::fd: ours, duplicated onto the child's stream

  static Stdio inherit() { return {}; }
  // `fd` < 0 means ours, as inherit().
  static Stdio from_fd(int fd) { return fd < 0 ? Stdio{} : Stdio{Kind::fd, fd}; }
  static Stdio null() { return {Kind::null, -1}; }
  // A new pipe: the child gets one end, the caller the other (in Child::in, out or err).
  static Stdio pipe() { return {Kind::pipe, -1}; }
};

// Everything a new process is started with, as data: spawn() carries it out with fork and exec,
// and any other starter of the same process must carry out the same description.
struct SpawnRequest {
  // A path; or, with search_path and no '/', a name looked up on this process's PATH as execvp
  // does (before the fork: nothing allocates in the child).
  std::string program;
  bool search_path = false;
  std::vector<std::string> argv;
  // "NAME=value" entries; nullopt: this process's environment.
  std::optional<std::vector<std::string>> env;
  std::string cwd;  // "": ours
  Stdio in, out, err;
  // new_session: setsid (leads a session and a process group of its own, out of the terminal's
  // job control); new_group: setpgid(0, 0).
  enum class Group { inherit, new_group, new_session };
  Group group = Group::inherit;
  // Dispositions set back to SIG_DFL (an ignored signal stays ignored across exec otherwise);
  // the signal mask is always emptied. all_signals() names every one.
  std::vector<int> default_signals;
  // The signal the child gets when the thread that started it ends (PR_SET_PDEATHSIG); 0: none.
  // A child whose parent already died when it was set exits 127 without running the program.
  int death_signal = 0;
  // A cgroup's directory, open: the child is made in it (clone3's CLONE_INTO_CGROUP, Linux 5.7;
  // a move by cgroup.procs waits for the kernel's RCU grace period, milliseconds a child), or
  // where the kernel cannot, joins it before its program runs; -1: none.
  int cgroup_fd = -1;
  // The CPUs it is bound to (sched_setaffinity); empty: the affinity it inherits.
  std::set<int> cpus;
  // The soft RLIMIT_NOFILE it gets; nullopt: ours.
  std::optional<std::uint64_t> descriptor_limit;
  // A descriptor of ours (above 2) that the program gets at the same number: its close-on-exec
  // flag is cleared in the child only. -1: none (every descriptor of ours is close-on-exec).
  int kept_fd = -1;
  // Descriptors above 2 that are not close-on-exec (inherited from whoever started this process:
  // a shell's, a CI runner's) are closed in the child, kept_fd aside, as Python's subprocess does
  // by default (close_fds=True): the program gets 0, 1, 2 and what the request names.
  bool close_inherited = false;
  // The process (with its descendants) that may ptrace the child where Yama's ptrace_scope is 1
  // (PR_SET_PTRACER, which survives exec); 0: none. Without Yama the call fails and is ignored.
  pid_t ptracer = 0;
};

// Every signal whose disposition can be set (for SpawnRequest::default_signals).
std::vector<int> all_signals();

// A process just forked, not yet known to have started its program.
struct Child {
  pid_t pid = -1;  // -1: it could not be forked; errno's value is in `error`
  int error = 0;
  bool pipe_failed = false;  // with pid -1: no pipe could be made (else the fork failed)
  // The read end of the pipe where the child leaves the errno of a failed start (exec, chdir,
  // a program not found on PATH); closed on exec when it works.
  int exec_report = -1;
  // Our ends of the streams asked for as Stdio::pipe() (close-on-exec, never 0, 1 or 2); -1 else.
  int in = -1, out = -1, err = -1;
};

// Forks and starts `request`'s program. Does not wait for the exec: a group forked first starts
// in one pass (wait_for_exec on each afterwards). A child whose start fails exits 127.
Child spawn(const SpawnRequest& request);

// Waits until a spawned child runs its program (0) or its start failed (the errno); closes the
// report's pipe.
int wait_for_exec(Child& child);

// Forks a child that runs `body(arg)` and exits with what it returns; no exec. The caller
// decides what the child may do (after a fork in a process with threads: async-signal-safe calls
// only). Returns the child's pid, or -1 with errno set.
pid_t run_in_child(int (*body)(void*), void* arg);

// The same for a callable `body` (returning int) that outlives the call.
template <class Body>
pid_t run_in_child(Body& body) {
  return run_in_child([](void* b) { return (*static_cast<Body*>(b))(); }, &body);
}

// Waits for the child `pid` to end and reaps it (through the one reaper, reaper.hpp: from now on
// it is this caller's, even where a handler had adopted it). nullopt when it is not ours to wait
// for (gone, reaped by someone else).
std::optional<ExitStatus> wait_for_exit(pid_t pid);

// A pipe, both ends close-on-exec and numbered above 2 (a process started with a standard stream
// closed would otherwise hand out 0, 1 or 2, which a child's own streams replace). False with
// errno set when none can be made.
bool make_pipe(int fds[2]);

// Whether `path` is a regular file (a link to one counts) this process may execute.
bool is_executable_file(const std::string& path);

// `name` looked up in `path` (colon-separated, as PATH) as execvp does: the first executable
// regular file (an empty entry is the current directory); `name` itself when it holds a '/';
// nothing when there is none.
std::optional<std::string> find_program(const std::string& name, const std::string& path);

}  // namespace trainrun
