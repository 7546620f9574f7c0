#pragma once

#include <string_view>
#include <vector>

#include "trainrun/stacks/stack.hpp"

namespace trainrun::stacks {

// The tools' outputs as threads with frames (innermost first), without /proc's part. Each
// throws std::runtime_error with the reason when the text is not the tool's format or holds no
// thread: the caller reports it as the tool's failure.

// The file names of the code that starts a Python worker (the launcher's bootstraps compile
// themselves under them: a worker forked by --preload, and a worker of torch 2.x started with its
// diagnosis channel): a Python frame in one, and every frame outside it, are the launcher's, not
// the worker's, and parse_py_spy_json leaves them out, so that the worker's stack ends as it would
// under `python script.py` (or runpy's frames under `python -m`).
inline constexpr char kPreloadBootstrapFile[] = "<trainrun --preload>";
inline constexpr char kBootstrapFile[] = "<trainrun>";
// The function of the thread that serves a worker's diagnosis channel, in a bootstrap file: that
// thread is the launcher's, and parse_py_spy_json leaves it out.
inline constexpr char kDiagnosisThreadFunction[] = "_trainrun_diagnosis";

// Leaves out of `thread` the launcher's frames (a bootstrap's, and every frame outside it);
// false when the whole thread is the launcher's (the diagnosis channel's), to be left out.
bool keep_workers_frames(Thread& thread);

// `py-spy dump --json [--native]`: frames without a module are Python's.
std::vector<Thread> parse_py_spy_json(std::string_view text);

// `eu-stack -p PID -i -m -s`: "TID n:", then "#k 0xADDR FUNCTION - MODULE" lines, each followed
// by an indented "FILE:LINE[:COLUMN]" where the source is known.
std::vector<Thread> parse_eu_stack(std::string_view text);

// `gdb -batch -p PID -ex "thread apply all bt"`: "Thread n (... (LWP tid) "name"):" headers and
// "#k [0xADDR in ]FUNCTION (ARGS) [at FILE:LINE | from MODULE]" lines.
std::vector<Thread> parse_gdb(std::string_view text);

}  // namespace trainrun::stacks
