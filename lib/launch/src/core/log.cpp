#include "trainrun/launch/core/log.hpp"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

namespace {

LogFormat& current_format() {
  static LogFormat format;
  return format;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::error:
      return "ERROR";
    case Level::warning:
      return "WARNING";
    case Level::info:
      return "INFO";
    case Level::debug:
      return "DEBUG";
  }
  return "INFO";
}

}  // namespace

std::string iso_time(double unix_seconds) {
  const auto ms = static_cast<long long>(std::floor(unix_seconds * 1000));
  const auto seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf,
                     static_cast<int>(ms - static_cast<long long>(seconds) * 1000));
}

void set_log_format(const LogFormat& format) { current_format() = format; }

bool shown(Level level) { return shown(level, current_format()); }

bool shown(Level level, const LogFormat& format) {
  switch (format.verbosity) {
    case Verbosity::quiet:
      return level == Level::error;
    case Verbosity::normal:
      return level != Level::debug;
    case Verbosity::verbose:
      return true;
  }
  return true;
}

std::string format_launcher_line(std::string_view line, Level level, const LogFormat& format,
                                 std::chrono::system_clock::time_point now) {
  if (!shown(level, format)) return {};
  std::string text = "trainrun: ";
  if (format.timestamps) {
    using namespace std::chrono;
    const double unix_seconds = duration<double>(now.time_since_epoch()).count();
    text += iso_time(unix_seconds) + " " + level_name(level) + " ";
  }
  // One line, whatever it quotes: host names and reasons from other nodes, paths, worker text.
  text += escape_control(line);
  text += '\n';
  return text;
}

std::string launcher_line(std::string_view line, Level level) {
  return format_launcher_line(line, level, current_format(), std::chrono::system_clock::now());
}

void say(std::string_view line, Level level) {
  const std::string text = launcher_line(line, level);
  if (!text.empty()) write_all(2, text.data(), text.size());
}

}  // namespace trainrun::launch
