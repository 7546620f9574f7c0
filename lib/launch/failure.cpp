#include "failure.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainrun/base/numbers.hpp"

namespace trainrun::launch {

namespace {

constexpr size_t kMaxErrorFileBytes = 4 << 20;

// Further from 1970 than this is no time a worker failed at ("inf", "nan", 1e300 included);
// such a value must neither win the root-cause race nor reach the time_t conversion.
constexpr double kMaxAbsTimestamp = 1e12;

std::optional<double> to_timestamp(const nlohmann::json& j) {
  std::optional<double> v;
  if (j.is_number()) {
    v = j.get<double>();
  } else if (j.is_string()) {
    v = parse_number(j.get<std::string>());
  }
  if (v && !(std::fabs(*v) <= kMaxAbsTimestamp)) return std::nullopt;
  return v;
}

std::string format_time(double unix_seconds) {
  if (!(std::fabs(unix_seconds) <= kMaxAbsTimestamp)) return "<invalid time>";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

}  // namespace

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status))
    s.signal = WTERMSIG(status);
  else if (WIFEXITED(status))
    s.code = WEXITSTATUS(status);
  return s;
}

ErrorFileContents parse_error_file(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object() || !j.contains("message"))
    throw std::runtime_error("expected a JSON object with a \"message\" field");
  ErrorFileContents out;
  const auto& m = j["message"];
  if (m.is_string()) {
    out.message = m.get<std::string>();
    if (j.contains("timestamp")) out.timestamp = to_timestamp(j["timestamp"]);
  } else if (m.is_object()) {
    if (m.contains("message") && m["message"].is_string())
      out.message = m["message"].get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
      const auto& extra = m["extraInfo"];
      if (extra.contains("py_callstack") && extra["py_callstack"].is_string())
        out.traceback = extra["py_callstack"].get<std::string>();
      if (extra.contains("timestamp")) out.timestamp = to_timestamp(extra["timestamp"]);
    }
  } else {
    throw std::runtime_error("\"message\" must be a string or an object");
  }
  return out;
}

std::optional<ErrorFileContents> read_error_file(const std::string& path, std::string* problem) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode)) {
    *problem = fmt::format("error file {} is not a regular file", path);
    return std::nullopt;
  }
  if (static_cast<size_t>(st.st_size) > kMaxErrorFileBytes) {
    *problem = fmt::format("error file {} is too large ({} bytes, limit {}); not read", path,
                           st.st_size, kMaxErrorFileBytes);
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return parse_error_file(ss.str());
  } catch (const std::exception& e) {
    *problem = fmt::format("error file {} is malformed: {}", path, e.what());
    return std::nullopt;
  }
}

size_t root_cause_index(const std::vector<ProcessFailure>& failures) {
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    const auto& a = failures[i];
    const auto& b = failures[best];
    if (a.timestamp < b.timestamp || (a.timestamp == b.timestamp && a.rank < b.rank)) best = i;
  }
  return best;
}

std::string signal_name(int signal) {
  static const std::pair<int, const char*> names[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [n, name] : names)
    if (n == signal) return name;
  return fmt::format("SIG{}", signal);
}

namespace {

void append_failure(std::string& out, int index, const ProcessFailure& f) {
  const bool by_signal = f.status.signal != 0;
  out += fmt::format("[{}]:\n", index);
  out += fmt::format("  time      : {}\n", format_time(f.timestamp));
  out += fmt::format("  host      : {}\n", f.host);
  out += fmt::format("  rank      : {} (local_rank: {})\n", f.rank, f.local_rank);
  out += fmt::format("  exitcode  : {} (pid: {})\n", by_signal ? -f.status.signal : f.status.code,
                     f.pid);
  out += fmt::format("  error_file: {}\n", f.has_error_file ? f.error_file : "<N/A>");
  std::string traceback;
  if (by_signal)
    traceback = fmt::format("Signal {} ({}) received by PID {}", f.status.signal,
                            signal_name(f.status.signal), f.pid);
  else if (!f.traceback.empty())
    traceback = f.traceback;
  else if (!f.message.empty())
    traceback = f.message;
  else
    traceback = "To enable traceback see: docs/cli.md#error-files (man trainrun: ERROR FILES)";
  // Multi-line tracebacks are indented under the field, as torchrun does.
  std::string indented;
  for (size_t i = 0; i < traceback.size(); ++i) {
    indented += traceback[i];
    if (traceback[i] == '\n' && i + 1 < traceback.size()) indented += "  ";
  }
  while (!indented.empty() && indented.back() == '\n') indented.pop_back();
  out += fmt::format("  traceback : {}\n", indented);
}

}  // namespace

std::string format_failure_summary(const std::string& title,
                                   const std::vector<ProcessFailure>& failures) {
  const std::string rule(60, '=');
  const std::string thin(60, '-');
  std::string out = rule + "\n" + title + " FAILED\n" + thin + "\nFailures:\n";
  const size_t root = root_cause_index(failures);
  int index = 1;
  bool any_other = false;
  for (size_t i = 0; i < failures.size(); ++i) {
    if (i == root) continue;
    append_failure(out, index++, failures[i]);
    any_other = true;
  }
  if (!any_other) out += "  <NO_OTHER_FAILURES>\n";
  out += thin + "\nRoot Cause (first observed failure):\n";
  append_failure(out, 0, failures[root]);
  out += rule + "\n";
  return out;
}

}  // namespace trainrun::launch
