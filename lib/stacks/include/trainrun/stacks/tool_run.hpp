#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace trainrun::stacks {

// The outcome of running one external tool.
struct ToolRun {
  bool started = false;
  bool timed_out = false;
  bool truncated = false;  // killed for printing more than the cap
  bool stopped = false;    // killed, or not started, for `stop`
  int exit_code = -1;      // when it exited; -1 otherwise
  int signal = 0;          // the signal that ended it, 0 if none
  std::string out, err;    // at most the cap, together
  std::string error;       // why it could not be started
};

// `program` (a path; find_program in trainrun/base/process.hpp looks one up) with `args`, no
// shell, started through trainrun's spawn(): stdin from /dev/null, stdout and stderr captured, in a
// process group of its own with the default signal mask and dispositions, DEBUGINFOD_URLS removed
// from its environment (no tool goes to the network). After `timeout`, or once it has printed
// more than `max_output` bytes, the whole group is killed; so too, within 20 ms, once `stop` (set
// by another thread) is true, and it is not started when it is already. Reaps it; a child already
// reaped by someone else (a launcher reaping every child) counts as exited with an unknown status.
ToolRun run_tool(const std::string& program, const std::vector<std::string>& args,
                 std::chrono::milliseconds timeout, std::size_t max_output,
                 const std::atomic<bool>* stop = nullptr);

// "py-spy timed out after 5 s", "gdb exited with status 1: ptrace: Operation not permitted.",
// "eu-stack was killed by signal 11 (SIGSEGV)": one line, the first line of what it printed on
// stderr that says something.
std::string describe_failure(const std::string& tool, const ToolRun& run,
                             std::chrono::milliseconds timeout);

// The line of a tool's stderr that says what went wrong: the first that mentions an error or
// ptrace (py-spy's "Error: ...", gdb's "ptrace: ..."), else the first that is not blank;
// terminal-safe and at most 300 bytes. Empty for an empty text.
std::string first_message(const std::string& text);

}  // namespace trainrun::stacks
