#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace trainrun::launch {

// How much the launcher says about itself: errors only (-q), the usual lines, or also debug
// lines (-v).
enum class Verbosity { quiet, normal, verbose };

// A launcher line's level. Under -q only errors are shown; debug lines only under -v.
enum class Level { error, warning, info, debug };

struct LogFormat {
  Verbosity verbosity = Verbosity::normal;
  bool timestamps = false;  // --log-timestamps: "trainrun: <ISO time> <LEVEL> <line>"
};

// Set once by main, before anything is said; every launcher line follows it.
void set_log_format(const LogFormat& format);

// "2026-01-02T03:04:05.678Z": a unix time in UTC, ISO 8601, to the millisecond.
std::string iso_time(double unix_seconds);

// Whether a line of this level is shown under `format`.
bool shown(Level level, const LogFormat& format);
// Whether a line of this level is shown under the format main set.
bool shown(Level level);

// One of the launcher's own lines: "trainrun: <line>\n", for stderr. The prefix tells them from
// the workers' output that shares the console. With timestamps, the UTC time (ISO 8601, in
// milliseconds) and the level follow the prefix. Control characters in `line` (a newline
// included) are escaped (trainrun::escape_control): it may quote text from other nodes. Empty
// when the level is not shown.
std::string launcher_line(std::string_view line, Level level = Level::info);
// The same with an explicit format and time: pure, for tests.
std::string format_launcher_line(std::string_view line, Level level, const LogFormat& format,
                                 std::chrono::system_clock::time_point now);

// Writes launcher_line(line, level) to stderr at once (blocking): for what is said outside the
// agent's event loop, before it starts or after it has ended.
void say(std::string_view line, Level level = Level::info);

}  // namespace trainrun::launch
