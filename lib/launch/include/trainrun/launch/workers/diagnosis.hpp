#pragma once

#include <optional>
#include <string>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// A Python worker of torch 2.x has a diagnosis channel: a socket pair whose one end the worker
// keeps, served by a thread of its own (python/trainrun_diagnosis.py), and whose
// other end the agent keeps. For each request line (its number) the worker answers with a line:
// the number and its Python traceback of every thread and its flight recorder's entries, read in
// the process itself: no ptrace, no change to the script, nothing imported but json. The roll
// call asks (rollcall/worker_diagnosis.hpp), on the supervisor's relay (diagnosis_relay.hpp),
// which alone reads the agent's end: the worker also writes a notice there, unasked.
struct DiagnosisChannel {
  int agent = -1;   // ours, close-on-exec
  int worker = -1;  // the worker's, passed at its start and closed here after it
};
// A notice of the worker's on its channel (a line whose id is 0, never a request's): its script
// is over, `how` it ended ("returned", "exit": SystemExit, "exception": an uncaught exception)
// and `code`, the exit status that asks for (128+2 for KeyboardInterrupt, which ends the process
// by SIGINT). The interpreter's teardown follows, which may hang or crash (workers/supervisor.hpp).
struct ScriptReturn {
  std::string how;
  int code = 0;
};
// The notice's text after its id (a JSON object); nullopt when it is not one.
std::optional<ScriptReturn> parse_script_return(const std::string& text);

// nullopt when no socket pair can be made (the worker then starts without one).
std::optional<DiagnosisChannel> open_diagnosis_channel();

// `request` (a Python worker's) rewritten to start the channel's thread before its command: its
// environment gets the bootstrap (python_bootstrap.hpp: `bootstrap_dir` first on PYTHONPATH,
// TRAINRUN_BOOTSTRAP naming the descriptor), and the channel's end `worker_fd` is kept at its
// number. Its command line stays `python OPTIONS COMMAND...`.
SpawnRequest with_diagnosis_bootstrap(SpawnRequest request, int worker_fd,
                                      const std::string& bootstrap_dir);

}  // namespace trainrun::launch
