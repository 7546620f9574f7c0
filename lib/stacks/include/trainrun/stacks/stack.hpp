#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainrun::stacks {

enum class FrameKind { python, native };

struct Frame {
  std::string function;  // as the tool names it ("stuck_here", "demo::stuck_here()", "0x7f3a...")
  std::string file;      // source file, empty when unknown
  int line = 0;          // 0 when unknown
  std::string module;    // shared object or executable of a native frame, empty when unknown
  FrameKind kind = FrameKind::native;
};

// One thread: what /proc says of it, and the frames a tool found, innermost first.
struct Thread {
  long tid = 0;
  std::string name;   // /proc/.../comm, or the tool's thread name
  std::string state;  // "S (sleeping)", "R (running)"...; empty when /proc could not be read
  std::string wchan;  // the kernel function it sleeps in; empty when running or unknown
  std::string
      syscall;  // "read", "futex", "running", "none" (blocked outside one), or "syscall 451"
  std::vector<Frame> frames;
};

// The stack of one process.
struct Stack {
  pid_t pid = 0;
  std::string tool;             // "py-spy", "eu-stack", "gdb", or "/proc" (the fallback: no frames)
  std::vector<Thread> threads;  // the main thread (tid == pid) first, then by tid
  // One line each: a tool that failed, timed out or is missing and what would give more, a
  // process left stopped and continued.
  std::vector<std::string> notes;
  std::string raw;  // the tool's own output (capped), for the per-rank dump files
  // What /proc said of the process before any tool attached: its CPU time (user and system,
  // seconds; negative when unread), when it was read (CLOCK_MONOTONIC seconds, this host's),
  // and the terminal its main thread waited to read ("/dev/pts/3"; empty: none).
  double cpu_s = -1;
  double read_at = 0;
  std::string terminal;

  // The main thread (tid == pid), else the first; nullptr when there is no thread at all.
  const Thread* main_thread() const;
};

// "stuck_here (train.py:41)", "demo::stuck_here() (stuck.cpp:7)", "read [libc.so.6]".
std::string describe(const Frame& frame);

// The whole stack for a person: notes, then each thread with its state and frames.
std::string format_stack(const Stack& stack);

// For the JSON summary and for carrying a stack to another node. from_json throws
// nlohmann::json::exception on a document of another shape.
void to_json(nlohmann::json& j, const Frame& frame);
void from_json(const nlohmann::json& j, Frame& frame);
void to_json(nlohmann::json& j, const Thread& thread);
void from_json(const nlohmann::json& j, Thread& thread);
void to_json(nlohmann::json& j, const Stack& stack);
void from_json(const nlohmann::json& j, Stack& stack);

}  // namespace trainrun::stacks
