// A worker's TORCHELASTIC_ERROR_FILE, as the launcher reads it and puts it into the summary.
#include <cmath>
#include <stdexcept>

#include "fuzz_util.hpp"
#include "trainrun/launch/core/failure.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ErrorFileContents contents;
  try {
    contents = parse_error_file(std::string(trainrun::fuzz::as_view(data, size)));
  } catch (const std::runtime_error&) {
    return 0;
  }
  FUZZ_CHECK(!contents.timestamp || std::isfinite(*contents.timestamp));
  // The agent takes the root cause's time from the file: the summary must cope with any value.
  ProcessFailure f;
  f.has_error_file = true;
  f.error_file = "/tmp/error.json";
  f.message = contents.message;
  f.traceback = contents.traceback;
  f.timestamp = contents.timestamp.value_or(0);
  ProcessFailure other = f;
  other.rank = 1;
  other.timestamp = 1;
  std::string summary = format_failure_summary("job", {f, other});
  FUZZ_CHECK(summary.find("Root Cause") != std::string::npos);
  // The summary sent to other nodes stays within its size, whatever the file held.
  FUZZ_CHECK(format_failure_summary("job", {f, other}, 16 * 1024).size() <= 16 * 1024);
  return 0;
}
