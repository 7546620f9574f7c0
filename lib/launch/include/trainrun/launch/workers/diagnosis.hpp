#pragma once

#include <optional>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// A Python worker of torch 2.x has a diagnosis channel: a socket pair whose one end the worker
// keeps, served by a thread of its own (template_bootstrap.cpp's _serve_diagnosis), and whose
// other end the agent keeps. For each request line (its number) the worker answers with a line:
// the number and its Python traceback of every thread and its flight recorder's entries, read in
// the process itself: no ptrace, no change to the script, nothing imported but json. The roll
// call asks (rollcall/worker_diagnosis.hpp).
struct DiagnosisChannel {
  int agent = -1;   // ours, close-on-exec
  int worker = -1;  // the worker's, passed at its start and closed here after it
};
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
