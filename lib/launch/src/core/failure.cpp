#include "trainrun/launch/core/failure.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "trainrun/base/files.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/core/manual.hpp"

namespace trainrun::launch {

namespace {

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
  // The size checked above may grow before the read: never take more than the limit.
  const std::string text = read_file_prefix(path, kMaxErrorFileBytes + 1).value_or("");
  if (text.size() > kMaxErrorFileBytes) {
    *problem = fmt::format("error file {} grew past {} bytes while being read; not read", path,
                           kMaxErrorFileBytes);
    return std::nullopt;
  }
  try {
    return parse_error_file(text);
  } catch (const std::exception& e) {
    *problem = fmt::format("error file {} is malformed: {}", path, e.what());
    return std::nullopt;
  }
}

size_t root_cause_index(const std::vector<ProcessFailure>& failures) {
  return rendezvous::root_cause_index(failures);
}

namespace {

size_t line_count(const std::string& text) {
  return text.empty() ? 0 : 1 + static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// What the summary shows as a failure's traceback. An error file that says something wins, as in
// torchrun, even for a worker stopped by a signal after it wrote the file (the Gloo error a rank
// recorded before the job was stopped, rather than the SIGTERM of the stop).
std::string traceback_text(const ProcessFailure& f) {
  if (f.has_error_file && !f.traceback.empty()) return f.traceback;
  if (f.has_error_file && !f.message.empty()) return f.message;
  std::string signal_line;
  if (f.status.signal != 0)
    signal_line = fmt::format("Signal {} ({}) received by PID {}", f.status.signal,
                              signal_name(f.status.signal), f.pid);
  // Without an error file, what the worker said last is the best clue there is.
  if (!f.has_error_file && !f.stderr_tail.empty())
    return fmt::format("{}{}last {} of its stderr (it wrote no error file):\n{}", signal_line,
                       signal_line.empty() ? "" : "\n",
                       count_of(static_cast<long long>(line_count(f.stderr_tail)), "line"),
                       f.stderr_tail);
  if (!signal_line.empty()) return signal_line;
  if (!f.traceback.empty()) return f.traceback;
  if (!f.message.empty()) return f.message;
  return error_file_hint(installed_manual());
}

// `text` cut to about `max_bytes` (0: whole): its head and tail around a note naming the file.
std::string shortened(const std::string& text, const ProcessFailure& f, size_t max_bytes) {
  if (max_bytes == 0 || text.size() <= max_bytes) return text;
  const std::string_view head = utf8_prefix(text, max_bytes / 2);
  const std::string_view tail = utf8_suffix(text, max_bytes / 2);
  return fmt::format("{}\n... [{} of {} bytes not shown; the whole error is in {} on {}] ...\n{}",
                     head, text.size() - head.size() - tail.size(), text.size(),
                     f.has_error_file ? f.error_file : "the worker's output", f.host, tail);
}

size_t widest_line(const std::string& text) {
  size_t widest = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    widest = std::max(widest, end - start);
    start = end + 1;
  }
  return widest;
}

std::string render_failure(int index, const ProcessFailure& f, size_t max_traceback) {
  const bool by_signal = f.status.signal != 0;
  std::string out = fmt::format("[{}]:\n", index);
  out += fmt::format("  time      : {}\n", format_time(f.timestamp));
  out += fmt::format("  host      : {}\n", f.host);
  out += fmt::format("  rank      : {} (local_rank: {})\n", f.rank, f.local_rank);
  out += fmt::format("  exitcode  : {} (pid: {})\n", by_signal ? -f.status.signal : f.status.code,
                     f.pid);
  if (!f.teardown.empty()) out += fmt::format("  teardown  : {}\n", f.teardown);
  out += fmt::format("  error_file: {}\n", f.has_error_file ? f.error_file : "<N/A>");
  if (!f.stdout_log.empty()) out += fmt::format("  stdout    : {}\n", f.stdout_log);
  if (!f.stderr_log.empty()) out += fmt::format("  stderr    : {}\n", f.stderr_log);
  const std::string traceback = shortened(traceback_text(f), f, max_traceback);
  // Multi-line tracebacks are indented under the field exactly as torchrun does it: every
  // newline, a final one included, is followed by two spaces.
  std::string indented;
  for (char c : traceback) {
    indented += c;
    if (c == '\n') indented += "  ";
  }
  out += fmt::format("  traceback : {}\n", indented);
  return out;
}

}  // namespace

std::vector<rendezvous::WorkerFailure> relayed_failures(const std::vector<ProcessFailure>& failures,
                                                        int* not_relayed) {
  std::vector<const ProcessFailure*> order;
  for (const auto& f : failures) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(),
                   [](const ProcessFailure* a, const ProcessFailure* b) {
                     return rendezvous::failed_before(*a, *b);
                   });
  const size_t kept = std::min(order.size(), rendezvous::kMaxRelayedFailures);
  *not_relayed = static_cast<int>(order.size() - kept);
  std::vector<rendezvous::WorkerFailure> out;
  for (size_t i = 0; i < kept; ++i) {
    const ProcessFailure& f = *order[i];
    rendezvous::WorkerFailure w;
    w.host = f.host;
    w.rank = f.rank;
    w.local_rank = f.local_rank;
    w.pid = f.pid;
    w.exit_code = f.status.code;
    w.signal = f.status.signal;
    w.timestamp = f.timestamp;
    w.error_file = f.has_error_file ? f.error_file : "";
    w.message = shortened(f.message, f, rendezvous::kMaxRelayedTraceback);
    w.traceback = shortened(f.traceback, f, rendezvous::kMaxRelayedTraceback);
    // Every node shows what the failing node shows: without an error file, its stderr's end.
    if (!f.has_error_file)
      w.stderr_tail = shortened(f.stderr_tail, f, rendezvous::kMaxRelayedTraceback);
    out.push_back(std::move(w));
  }
  return out;
}

ProcessFailure from_relayed(const rendezvous::WorkerFailure& w) {
  ProcessFailure f;
  f.host = escape_control(w.host, true);
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.pid = static_cast<pid_t>(w.pid);
  f.status.code = w.exit_code;
  f.status.signal = w.signal;
  f.timestamp = w.timestamp;
  f.has_error_file = !w.error_file.empty();
  f.error_file = escape_control(w.error_file, true);
  f.message = escape_control(w.message, true);
  f.traceback = escape_control(w.traceback, true);
  f.stderr_tail = escape_control(w.stderr_tail, true);
  return f;
}

std::string format_failure_summary(const std::string& title,
                                   const std::vector<ProcessFailure>& failures, size_t max_bytes,
                                   std::optional<size_t> decided_root, size_t not_relayed) {
  const size_t root = decided_root.value_or(root_cause_index(failures));
  const size_t others = failures.size() - 1;
  // Within a limit the root cause's traceback may take half of it, the others share a quarter;
  // without one (0) every traceback is whole, the others' as the root cause's.
  const size_t root_room = max_bytes / 2;
  const size_t other_room =
      max_bytes == 0 || others == 0 ? 0 : std::max<size_t>(256, max_bytes / 4 / others);
  // As torchrun: each failure is numbered by its place in rank order, the root cause included.
  std::vector<size_t> order(failures.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return failures[a].rank < failures[b].rank; });
  std::string root_entry;
  std::vector<std::string> entries;
  for (size_t place = 0; place < order.size(); ++place) {
    const size_t i = order[place];
    std::string entry =
        render_failure(static_cast<int>(place), failures[i], i == root ? root_room : other_room);
    if (i == root)
      root_entry = std::move(entry);
    else
      entries.push_back(std::move(entry));
  }
  // The rules are as wide as the widest line, at most 60 (torchrun's width).
  size_t width = std::max(title.size() + 7, widest_line(root_entry));
  for (const auto& e : entries) width = std::max(width, widest_line(e));
  width = std::min<size_t>(width, 60);
  const std::string rule(width, '=');
  const std::string thin(width, '-');
  const std::string head = rule + "\n" + title + " FAILED\n" + thin + "\nFailures:\n";
  const std::string tail =
      thin + "\nRoot Cause (first observed failure):\n" + root_entry + rule + "\n";
  // Room kept for the line that counts failures left out.
  constexpr size_t kOmittedLine = 96;
  std::string out = head;
  size_t omitted = 0;
  for (const auto& entry : entries) {
    if (max_bytes != 0 && out.size() + entry.size() + tail.size() + kOmittedLine > max_bytes)
      ++omitted;
    else
      out += entry;
  }
  if (others == 0) out += "  <NO_OTHER_FAILURES>\n";
  if (omitted != 0)
    out += fmt::format("  ... {} more failure(s) not shown; each node's own summary lists all\n",
                       omitted);
  if (not_relayed != 0)
    out += fmt::format(
        "  ... and {} later failure(s) not relayed between nodes; each node's --summary-file "
        "lists its own\n",
        not_relayed);
  out += tail;
  // A title too long for the limit still leaves a summary within it.
  if (max_bytes != 0 && out.size() > max_bytes) out = std::string(utf8_prefix(out, max_bytes));
  return out;
}

}  // namespace trainrun::launch
