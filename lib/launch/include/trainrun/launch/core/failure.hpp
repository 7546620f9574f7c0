#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "trainrun/base/process.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What a worker left in its TORCHELASTIC_ERROR_FILE.
struct ErrorFileContents {
  std::string message;
  std::string traceback;            // py_callstack or a C++ stack trace; may be empty
  std::optional<double> timestamp;  // unix seconds
};

// Parses both torchelastic error-file forms:
//   {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "123"}}}
//   {"message": "text", "timestamp": 123}
// Throws std::runtime_error with a one-line reason for anything else.
ErrorFileContents parse_error_file(const std::string& text);

// The most of an error file that is read (torchelastic's JSON); a larger file is named, not read.
inline constexpr size_t kMaxErrorFileBytes = 4 << 20;

// Reads and parses an error file, never more than kMaxErrorFileBytes of it. nullopt when there is
// none; a problem with the file (too big, malformed) comes back as a message in `problem`, never
// as an exception.
std::optional<ErrorFileContents> read_error_file(const std::string& path, std::string* problem);

struct ProcessFailure {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  ExitStatus status;
  std::string host;
  std::string error_file;  // path; "<N/A>" in the summary when the worker wrote none
  bool has_error_file = false;
  double timestamp = 0;  // unix seconds: from the error file, else when the exit was seen
  std::string message;
  std::string traceback;
  // Its log files, when --redirects/--tee/--local-ranks-filter sent the stream to one.
  std::string stdout_log;
  std::string stderr_log;
  // The last lines of its stderr (OutputTail::text()), when it passed through trainrun: shown as
  // the traceback of a worker that wrote no error file.
  std::string stderr_tail;
  // What went wrong after its script was over (a teardown that hung or crashed), `status` being
  // the script's own; empty: nothing. This node's alone: not relayed to the others.
  std::string teardown;
};

// The root cause by the job's one rule (rendezvous::root_cause_index: the earliest timestamp,
// then the lowest rank). `failures` must not be empty.
size_t root_cause_index(const std::vector<ProcessFailure>& failures);

// What the other nodes are told of this node's failures: the earliest kMaxRelayedFailures by the
// rule, message and traceback cut to kMaxRelayedTraceback (head and tail around a note naming
// the file and host holding them whole); `not_relayed` counts those left out.
std::vector<rendezvous::WorkerFailure> relayed_failures(const std::vector<ProcessFailure>& failures,
                                                        int* not_relayed);
// A failure another node relayed, its text made safe for a terminal (control characters escaped).
ProcessFailure from_relayed(const rendezvous::WorkerFailure& failure);

// torchrun's failure summary, for a job named `title` (the entrypoint): every failure, the root
// cause last under its own heading. With `max_bytes` (0: no limit) the text fits in that many
// bytes: each traceback keeps its head and tail around a note that names the host and error file
// holding it whole, and failures beyond the room are counted in one line (the root cause always
// stays). `root`: the root cause's index when another decided it (else the rule's);
// `not_relayed`: failures of the job not in `failures`, counted in a line.
std::string format_failure_summary(const std::string& title,
                                   const std::vector<ProcessFailure>& failures,
                                   size_t max_bytes = 0, std::optional<size_t> root = {},
                                   size_t not_relayed = 0);

}  // namespace trainrun::launch
