#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace trainrun::launch {

// How a process ended, as waitpid reported it.
struct ExitStatus {
  int code = 0;    // exit code when exited normally
  int signal = 0;  // terminating signal, 0 when it exited
  bool failed() const { return signal != 0 || code != 0; }
  // The shell's convention: the exit code, or 128+N for death by signal N.
  int shell_code() const { return signal != 0 ? 128 + signal : code; }
  static ExitStatus from_wait_status(int status);
};

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
};

// The earliest failure (by timestamp, then rank). `failures` must not be empty.
size_t root_cause_index(const std::vector<ProcessFailure>& failures);

// torchrun's failure summary, for a job named `title` (the entrypoint): every failure, the root
// cause last under its own heading. With `max_bytes` (0: no limit) the text fits in that many
// bytes: each traceback keeps its head and tail around a note that names the host and error file
// holding it whole, and failures beyond the room are counted in one line (the root cause always
// stays).
std::string format_failure_summary(const std::string& title,
                                   const std::vector<ProcessFailure>& failures,
                                   size_t max_bytes = 0);

// "SIGKILL" for 9, "SIG42" for unknown numbers.
std::string signal_name(int signal);

// How a process ended, as a sentence's end: "exited with code 3", "was killed by SIGKILL".
std::string describe_exit(const ExitStatus& status);

}  // namespace trainrun::launch
