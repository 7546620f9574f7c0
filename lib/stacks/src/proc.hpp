#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "trainrun/stacks/stack.hpp"

namespace trainrun::stacks {

// Every thread of `pid` as /proc shows it: tid, name, state, wait channel, system call; no
// frames. Empty when the process does not exist. Fields that cannot be read (another user's
// process) stay empty.
std::vector<Thread> read_proc_threads(pid_t pid);

// The one-letter state of the process ('S', 'R', 'T' stopped, 't' stopped by a tracer...), and
// its tracer's pid (0: none); nothing when the process is gone.
struct ProcessState {
  char state = '?';
  pid_t tracer = 0;
};
std::optional<ProcessState> read_process_state(pid_t pid);

// Whether the process runs a Python interpreter: its executable is python* or it maps libpython.
bool is_python_process(pid_t pid);

// The CPU time (user and system, every thread) the process has used, in seconds; nothing when
// it is gone.
std::optional<double> process_cpu_seconds(pid_t pid);

// The terminal the process's main thread waits to read, as its descriptor names it
// ("/dev/pts/3"): blocked in read(), select() or poll() on a terminal's descriptor (pdb's prompt,
// input()). Empty when it waits for anything else, runs, or cannot be read (another user's).
std::string terminal_input(pid_t pid);

// The name of system call `number` on this machine ("read"), or "syscall N" when unknown.
std::string syscall_name(long number);

// A /proc/PID/task/TID/syscall line in words: "read", "running", "none" (blocked outside a
// system call); empty for an empty line.
std::string describe_syscall_line(const std::string& line);

}  // namespace trainrun::stacks
