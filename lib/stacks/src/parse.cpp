#include "trainrun/stacks/parse.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

#include "trainrun/base/numbers.hpp"

namespace trainrun::stacks {

namespace {

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "#12 " or "#3  ": the frame number and what follows, or nothing for another line.
bool frame_line(std::string_view line, std::string_view& rest) {
  if (!starts_with(line, "#")) return false;
  std::size_t i = 1;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i == 1) return false;
  rest = trim(line.substr(i));
  return true;
}

// "FILE:LINE" or "FILE:LINE:COLUMN": the file and line; false for anything else.
bool file_and_line(std::string_view text, std::string& file, int& line) {
  auto last = text.rfind(':');
  if (last == std::string_view::npos) return false;
  auto number = parse_integer(text.substr(last + 1));
  if (!number) return false;
  // With a column, the line is the number before it.
  const auto before = text.rfind(':', last == 0 ? 0 : last - 1);
  if (before != std::string_view::npos && before < last) {
    if (auto l = parse_integer(text.substr(before + 1, last - before - 1))) {
      number = l;
      last = before;
    }
  }
  if (last == 0 || *number < 0) return false;
  file = std::string(text.substr(0, last));
  line = static_cast<int>(*number);
  return true;
}

std::string_view skip_address(std::string_view s) {
  if (!starts_with(s, "0x")) return s;
  const auto space = s.find(' ');
  return space == std::string_view::npos ? std::string_view{} : trim(s.substr(space));
}

}  // namespace

bool keep_workers_frames(const Thread& thread) {
  const std::string_view file = kDiagnosisFile;
  return std::none_of(thread.frames.begin(), thread.frames.end(), [&](const Frame& f) {
    return f.kind == FrameKind::python && f.function == kDiagnosisThreadFunction &&
           f.file.size() >= file.size() &&
           f.file.compare(f.file.size() - file.size(), file.size(), file) == 0;
  });
}

std::vector<Thread> parse_py_spy_json(std::string_view text) {
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) throw std::runtime_error("not py-spy's JSON");
  std::vector<Thread> threads;
  try {
    for (const auto& t : doc) {
      Thread thread;
      thread.tid = t.value("os_thread_id", nlohmann::json()).is_number_integer()
                       ? t.at("os_thread_id").get<long>()
                       : 0;
      thread.name = t.value("thread_name", nlohmann::json()).is_string()
                        ? t.at("thread_name").get<std::string>()
                        : std::string{};
      for (const auto& f : t.at("frames")) {
        Frame frame;
        frame.function = f.at("name").get<std::string>();
        frame.file = f.at("filename").get<std::string>();
        frame.line = f.value("line", 0);
        const auto& module = f.value("module", nlohmann::json());
        frame.kind = module.is_string() ? FrameKind::native : FrameKind::python;
        if (module.is_string()) {
          frame.module = module.get<std::string>();
          // A native frame's "filename" is its library: no source file.
          if (frame.file == frame.module) frame.file.clear();
        }
        thread.frames.push_back(std::move(frame));
      }
      if (keep_workers_frames(thread)) threads.push_back(std::move(thread));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("unexpected py-spy JSON: ") + e.what());
  }
  if (threads.empty()) throw std::runtime_error("py-spy listed no thread");
  return threads;
}

std::vector<Thread> parse_eu_stack(std::string_view text) {
  std::vector<Thread> threads;
  for (std::string_view line : lines_of(text)) {
    std::string_view rest;
    if (starts_with(line, "TID ")) {
      auto tid = parse_integer(trim(line.substr(4, line.find(':') - 4)));
      if (!tid) throw std::runtime_error("unexpected eu-stack line: " + std::string(line));
      threads.emplace_back().tid = static_cast<long>(*tid);
    } else if (frame_line(line, rest)) {
      if (threads.empty()) throw std::runtime_error("eu-stack printed a frame before a thread");
      Frame frame;
      rest = skip_address(rest);
      // "FUNCTION - MODULE"; a frame without a symbol is "- MODULE".
      const auto dash = rest.rfind(" - ");
      if (starts_with(rest, "- ")) {
        frame.module = std::string(trim(rest.substr(2)));
      } else if (dash != std::string_view::npos) {
        frame.function = std::string(trim(rest.substr(0, dash)));
        frame.module = std::string(trim(rest.substr(dash + 3)));
      } else {
        frame.function = std::string(rest);
      }
      threads.back().frames.push_back(std::move(frame));
    } else if (starts_with(line, "    ") && !threads.empty() && !threads.back().frames.empty()) {
      Frame& last = threads.back().frames.back();
      file_and_line(trim(line), last.file, last.line);
    }
  }
  if (threads.empty()) throw std::runtime_error("eu-stack listed no thread");
  return threads;
}

std::vector<Thread> parse_gdb(std::string_view text) {
  std::vector<Thread> threads;
  for (std::string_view line : lines_of(text)) {
    std::string_view rest;
    if (starts_with(line, "Thread ") && line.back() == ':') {
      Thread thread;
      // "(Thread 0x7f... (LWP 1234) "name"):" or, without libthread_db, "(process 1234)".
      for (std::string_view key : {std::string_view("(LWP "), std::string_view("(process ")}) {
        const auto at = line.find(key);
        if (at == std::string_view::npos) continue;
        const auto start = at + key.size();
        auto end = start;
        while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
        if (auto tid = parse_integer(line.substr(start, end - start)))
          thread.tid = static_cast<long>(*tid);
        break;
      }
      const auto open_quote = line.find('"');
      const auto close_quote = line.rfind('"');
      if (open_quote != std::string_view::npos && close_quote > open_quote)
        thread.name = std::string(line.substr(open_quote + 1, close_quote - open_quote - 1));
      threads.push_back(std::move(thread));
    } else if (frame_line(line, rest) && !threads.empty()) {
      Frame frame;
      rest = skip_address(rest);
      if (starts_with(rest, "in ")) rest.remove_prefix(3);
      // The function ends at " (" outside template brackets: its arguments follow.
      int depth = 0;
      std::size_t end = 0;
      for (; end < rest.size(); ++end) {
        const char c = rest[end];
        if (c == '<' || c == '{' || c == '[') ++depth;
        if (c == '>' || c == '}' || c == ']') --depth;
        if (depth <= 0 && c == ' ' && end + 1 < rest.size() && rest[end + 1] == '(') break;
      }
      frame.function = std::string(rest.substr(0, end));
      if (frame.function == "??") frame.function.clear();
      const auto at = rest.rfind(" at ");
      const auto from = rest.rfind(" from ");
      if (at != std::string_view::npos && at >= end) {
        file_and_line(trim(rest.substr(at + 4)), frame.file, frame.line);
      } else if (from != std::string_view::npos && from >= end) {
        frame.module = std::string(trim(rest.substr(from + 6)));
      }
      threads.back().frames.push_back(std::move(frame));
    }
  }
  if (threads.empty()) throw std::runtime_error("gdb listed no thread");
  return threads;
}

}  // namespace trainrun::stacks
