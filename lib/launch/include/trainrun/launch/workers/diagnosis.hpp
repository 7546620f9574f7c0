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
// call asks (rollcall/worker_diagnosis.hpp).
struct DiagnosisChannel {
  int agent = -1;   // ours, close-on-exec
  int worker = -1;  // the worker's, passed at its start and closed here after it
};
// nullopt when no socket pair can be made (the worker then starts without one).
std::optional<DiagnosisChannel> open_diagnosis_channel();

// `request` (a Python worker's) rewritten to start the channel's thread before its command: its
// environment gets the bootstrap (python_bootstrap.hpp: `bootstrap_dir` first on PYTHONPATH,
// TRAINRUN_BOOTSTRAP naming the descriptor), and the channel's end `worker_fd` is kept at its
// number. Its command line stays `python OPTIONS COMMAND...`.
SpawnRequest with_diagnosis_bootstrap(SpawnRequest request, int worker_fd,
                                      const std::string& bootstrap_dir);

}  // namespace trainrun::launch
