#pragma once

#include <optional>
#include <string>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// A Python worker of torch 2.x has a diagnosis channel: a socket pair whose one end the worker
// keeps, served by a thread of its own (template_bootstrap.cpp's _serve_diagnosis), and whose
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

// `request` (a Python worker's: the interpreter, its options, then the command) rewritten to
// start through the diagnosis bootstrap: `python OPTIONS -c LOADER FD SIZE COMMAND...`, the
// channel's end `worker_fd` kept at its number. Once spawned, send_diagnosis_bootstrap writes the
// program the loader reads.
SpawnRequest with_diagnosis_bootstrap(SpawnRequest request, int worker_fd);
// Writes the bootstrap on the agent's end; false when it cannot (the worker then fails to start
// and says why on its stderr, as Python does for a program it cannot read).
bool send_diagnosis_bootstrap(int agent_fd);

}  // namespace trainrun::launch
