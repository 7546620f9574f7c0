#pragma once

#include <string>

#include "trainrun/base/process.hpp"
#include "trainrun/launch/workers/diagnosis.hpp"

namespace trainrun::launch {

// A Python worker whose script is over (its diagnosis channel said so, ScriptReturn) has its
// interpreter's teardown left: destroy_process_group, atexit handlers, threads that are not
// daemons, the modules' destructors. Its result is its script's, however the teardown ends; the
// rules below say how its end counts, and the words said of it. Pure (docs/cli.md, "A finished
// script").

// The status the script asked for: its exit code, or SIGINT for a KeyboardInterrupt.
ExitStatus script_status(const ScriptReturn& script);

// "rank 1's script returned", "rank 1's script exited with 3", "rank 1's script raised an
// exception".
std::string script_over(int rank, const ScriptReturn& script);

// "rank 1 finished its script 30 s ago and has not exited: it is in WHERE".
std::string not_exited_line(int rank, double seconds, const std::string& where);

// How a worker's end counts.
struct EndAfterScript {
  ExitStatus status;     // the job's view of it: the script's where its teardown went wrong
  std::string teardown;  // what went wrong in its teardown, a sentence; empty: nothing
};
// Worker `rank` ended with `process` after its script was over: `ended_by_grace` when the agent
// ended it after --exit-grace (`where` it was then, `grace_s` the grace); `stopping` when the
// agent had signalled its group (a stop, a forwarded signal): a signal's end is then that
// signal's, as for any worker. A death by a signal the script did not ask for is a crash of the
// teardown, named; an exit code stays the process's own (an atexit handler's os._exit(3) is
// deliberate).
EndAfterScript end_after_script(int rank, const ExitStatus& process, const ScriptReturn& script,
                                bool ended_by_grace, const std::string& where, double grace_s,
                                bool stopping);

}  // namespace trainrun::launch
