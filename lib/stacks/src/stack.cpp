#include "trainrun/stacks/stack.hpp"

#include <fmt/format.h>

namespace trainrun::stacks {

const Thread* Stack::main_thread() const {
  for (const auto& t : threads)
    if (t.tid == pid) return &t;
  return threads.empty() ? nullptr : &threads.front();
}

std::string describe(const Frame& frame) {
  std::string text = frame.function.empty() ? "??" : frame.function;
  if (!frame.file.empty()) {
    text += frame.line > 0 ? fmt::format(" ({}:{})", frame.file, frame.line)
                           : fmt::format(" ({})", frame.file);
  } else if (!frame.module.empty()) {
    text += fmt::format(" [{}]", frame.module.substr(frame.module.rfind('/') + 1));
  }
  return text;
}

std::string format_stack(const Stack& stack) {
  std::string out = fmt::format("pid {}: {}\n", stack.pid, stack.tool.empty() ? "-" : stack.tool);
  for (const auto& note : stack.notes) out += "note: " + note + "\n";
  for (const auto& t : stack.threads) {
    out += fmt::format("Thread {} \"{}\"{}", t.tid, t.name, t.tid == stack.pid ? " (main)" : "");
    if (!t.state.empty()) out += ": " + t.state;
    if (!t.syscall.empty()) out += ", syscall " + t.syscall;
    if (!t.wchan.empty()) out += ", wchan " + t.wchan;
    out += "\n";
    for (const auto& f : t.frames)
      out += fmt::format("    {}{}\n", describe(f), f.kind == FrameKind::native ? "" : "  [py]");
  }
  return out;
}

void to_json(nlohmann::json& j, const Frame& frame) {
  j = {{"function", frame.function},
       {"file", frame.file},
       {"line", frame.line},
       {"module", frame.module},
       {"kind", frame.kind == FrameKind::python ? "python" : "native"}};
}

void from_json(const nlohmann::json& j, Frame& frame) {
  j.at("function").get_to(frame.function);
  j.at("file").get_to(frame.file);
  j.at("line").get_to(frame.line);
  j.at("module").get_to(frame.module);
  frame.kind = j.at("kind").get<std::string>() == "python" ? FrameKind::python : FrameKind::native;
}

void to_json(nlohmann::json& j, const Thread& thread) {
  j = {{"tid", thread.tid},     {"name", thread.name},       {"state", thread.state},
       {"wchan", thread.wchan}, {"syscall", thread.syscall}, {"frames", thread.frames}};
}

void from_json(const nlohmann::json& j, Thread& thread) {
  j.at("tid").get_to(thread.tid);
  j.at("name").get_to(thread.name);
  j.at("state").get_to(thread.state);
  j.at("wchan").get_to(thread.wchan);
  j.at("syscall").get_to(thread.syscall);
  j.at("frames").get_to(thread.frames);
}

void to_json(nlohmann::json& j, const Stack& stack) {
  j = {{"pid", stack.pid},         {"tool", stack.tool},        {"threads", stack.threads},
       {"notes", stack.notes},     {"raw", stack.raw},          {"cpu_s", stack.cpu_s},
       {"read_at", stack.read_at}, {"terminal", stack.terminal}};
}

void from_json(const nlohmann::json& j, Stack& stack) {
  j.at("pid").get_to(stack.pid);
  j.at("tool").get_to(stack.tool);
  j.at("threads").get_to(stack.threads);
  j.at("notes").get_to(stack.notes);
  j.at("raw").get_to(stack.raw);
  // Absent from an agent of an earlier version.
  stack.cpu_s = j.value("cpu_s", -1.0);
  stack.read_at = j.value("read_at", 0.0);
  stack.terminal = j.value("terminal", "");
}

}  // namespace trainrun::stacks
