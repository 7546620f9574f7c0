#pragma once

#include <string_view>
#include <vector>

#include "trainrun/stacks/stack.hpp"

namespace trainrun::stacks {

// The tools' outputs as threads with frames (innermost first), without /proc's part. Each
// throws std::runtime_error with the reason when the text is not the tool's format or holds no
// thread: the caller reports it as the tool's failure.

// The thread that serves a Python worker's diagnosis channel runs this function of this file (the
// launcher's bootstrap writes it to a directory of its own): that thread is the launcher's, and
// parse_py_spy_json leaves it out. The worker's own threads hold no frame of the launcher's.
inline constexpr char kDiagnosisFile[] = "/trainrun_diagnosis.py";
inline constexpr char kDiagnosisThreadFunction[] = "_trainrun_diagnosis";

// False when `thread` is the launcher's (the diagnosis channel's), to be left out.
bool keep_workers_frames(const Thread& thread);

// `py-spy dump --json [--native]`: frames without a module are Python's.
std::vector<Thread> parse_py_spy_json(std::string_view text);

// `eu-stack -p PID -i -m -s`: "TID n:", then "#k 0xADDR FUNCTION - MODULE" lines, each followed
// by an indented "FILE:LINE[:COLUMN]" where the source is known.
std::vector<Thread> parse_eu_stack(std::string_view text);

// `gdb -batch -p PID -ex "thread apply all bt"`: "Thread n (... (LWP tid) "name"):" headers and
// "#k [0xADDR in ]FUNCTION (ARGS) [at FILE:LINE | from MODULE]" lines.
std::vector<Thread> parse_gdb(std::string_view text);

}  // namespace trainrun::stacks
