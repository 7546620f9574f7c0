#pragma once

#include <ctime>
#include <filesystem>
#include <string>

namespace trainrun::runtime {

// The error record torchelastic launchers read from $TORCHELASTIC_ERROR_FILE:
// {"message": {"message": M, "extraInfo": {"py_callstack": STACK, "timestamp": "<unix secs>"}}}
std::string format_error_record(const std::string& message, const std::string& stack,
                                std::time_t timestamp);

// Writes the record to `path` (replacing it atomically). Throws RuntimeError when it cannot.
void write_error_file(const std::filesystem::path& path, const std::string& message,
                      const std::string& stack);

// "Type: message" and a stack trace for the exception being handled (call inside a catch):
// the throw site's trace for c10::Error, else the trace where it was caught.
struct ExceptionReport {
  std::string message;
  std::string stack;
};
ExceptionReport describe_current_exception();

}  // namespace trainrun::runtime
