#include "trainrun/stacks/collect.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "proc.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/stacks/parse.hpp"
#include "trainrun/stacks/tool_run.hpp"

namespace trainrun::stacks {

namespace {

struct Attempt {
  std::string tool;
  std::vector<std::string> args;
  std::vector<Thread> (*parse)(std::string_view);
};

// Runs one tool; its threads, or nothing with a note saying why. `killed` is set when the tool
// did not end by itself (killed, or crashed), perhaps while attached.
std::optional<std::vector<Thread>> attempt(const std::string& program, const Attempt& a,
                                           const CollectOptions& options, Stack& stack,
                                           bool& killed) {
  ToolRun run = run_tool(program, a.args, options.timeout, options.max_output, options.stop);
  if (run.started) stack.raw = run.out;
  if (run.started && (run.timed_out || run.truncated || run.stopped || run.signal != 0))
    killed = true;
  // gdb says "exited normally" even when it could not attach: the parse decides.
  const bool ended_well = run.started && !run.timed_out && !run.truncated && !run.stopped &&
                          run.signal == 0 &&
                          (run.exit_code == 0 || (a.tool == "eu-stack" && run.exit_code == 1));
  if (!ended_well) {
    stack.notes.push_back(describe_failure(a.tool, run, options.timeout));
    return std::nullopt;
  }
  try {
    return a.parse(run.out);
  } catch (const std::runtime_error& e) {
    std::string note = fmt::format("{} gave no stack ({})", a.tool, e.what());
    const std::string said = first_message(run.err);
    if (!said.empty()) note += ": " + said;
    stack.notes.push_back(std::move(note));
    return std::nullopt;
  }
}

// The tool's threads with /proc's state of each; threads /proc saw that the tool did not list
// come after, without frames.
std::vector<Thread> merge(std::vector<Thread> from_tool, const std::vector<Thread>& from_proc,
                          pid_t pid) {
  std::vector<Thread> merged;
  for (const auto& p : from_proc) {
    auto it = std::find_if(from_tool.begin(), from_tool.end(),
                           [&](const Thread& t) { return t.tid == p.tid; });
    Thread t = p;
    if (it != from_tool.end()) {
      t.frames = std::move(it->frames);
      if (!it->name.empty()) t.name = it->name;
      from_tool.erase(it);
    }
    merged.push_back(std::move(t));
  }
  // Threads started after /proc was read.
  for (auto& t : from_tool) merged.push_back(std::move(t));
  std::stable_sort(merged.begin(), merged.end(), [pid](const Thread& a, const Thread& b) {
    return (a.tid == pid) > (b.tid == pid);
  });
  return merged;
}

}  // namespace

std::string CollectOptions::default_path() {
  const char* path = std::getenv("PATH");
  return path ? path : "/usr/local/bin:/usr/bin:/bin";
}

Stack collect_stack(pid_t pid, const CollectOptions& options) {
  Stack stack;
  stack.pid = pid;
  // Before any tool stops the threads: afterwards every wait channel would be ptrace's.
  const auto before = read_process_state(pid);
  const std::vector<Thread> proc_threads = read_proc_threads(pid);
  stack.cpu_s = process_cpu_seconds(pid).value_or(-1);
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  stack.read_at = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
  stack.terminal = terminal_input(pid);
  if (!before || proc_threads.empty()) {
    stack.notes.push_back(fmt::format("no process {}", pid));
    return stack;
  }
  const bool was_stopped = before->state == 'T' || before->state == 't';
  const bool python = is_python_process(pid);
  const std::string p = std::to_string(pid);

  std::optional<std::vector<Thread>> threads;
  bool killed = false;
  const auto stopped = [&] { return options.stop && options.stop->load(); };
  if (python) {
    if (auto py_spy = find_program("py-spy", options.path)) {
      // --native adds the C++ side (an extension's, LibTorch's) under the Python frames; it fails
      // where native unwinding does, and then the Python frames alone are still worth having.
      threads = attempt(*py_spy,
                        {"py-spy", {"dump", "--pid", p, "--json", "--native"}, parse_py_spy_json},
                        options, stack, killed);
      if (threads) {
        stack.tool = "py-spy";
      } else if (!stopped() && !stack.notes.empty() &&
                 stack.notes.back().find("timed out") == std::string::npos &&
                 stack.notes.back().find("Permission Denied") == std::string::npos) {
        threads = attempt(*py_spy, {"py-spy", {"dump", "--pid", p, "--json"}, parse_py_spy_json},
                          options, stack, killed);
        if (threads) stack.tool = "py-spy";
      }
    } else {
      stack.notes.push_back(
          "py-spy is not installed: `pip install py-spy` would give the Python "
          "frames");
    }
  }
  if (!threads && !stopped()) {
    const auto eu_stack = find_program("eu-stack", options.path);
    const auto gdb = eu_stack ? std::nullopt : find_program("gdb", options.path);
    if (eu_stack) {
      threads = attempt(*eu_stack, {"eu-stack", {"-p", p, "-i", "-m", "-s"}, parse_eu_stack},
                        options, stack, killed);
      if (threads) stack.tool = "eu-stack";
    } else if (gdb) {
      threads = attempt(*gdb,
                        {"gdb",
                         {"-nx", "-batch", "-iex", "set debuginfod enabled off", "-p", p, "-ex",
                          "set pagination off", "-ex", "thread apply all bt"},
                         parse_gdb},
                        options, stack, killed);
      if (threads) stack.tool = "gdb";
    } else if (!python) {
      stack.notes.push_back(
          "neither eu-stack (elfutils) nor gdb is installed: either would give "
          "the native frames");
    }
  }
  if (!threads) {
    for (std::string note : stack.notes) {
      // gdb: "Operation not permitted"; py-spy: "Permission Denied"; eu-stack: "permission denied".
      std::transform(note.begin(), note.end(), note.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (note.find("not permitted") == std::string::npos &&
          note.find("permission denied") == std::string::npos)
        continue;
      stack.notes.push_back(
          "ptrace was refused: CAP_SYS_PTRACE, or kernel.yama.ptrace_scope 0, "
          "would let the tools attach");
      break;
    }
  }
  if (threads) {
    stack.threads = merge(std::move(*threads), proc_threads, pid);
  } else {
    stack.tool = "/proc";
    stack.threads = proc_threads;
  }

  // A tool killed while attached leaves the SIGSTOP of its attach behind: the process stops at
  // once, or, in uninterruptible sleep (a vfork parent waiting for its child), when the sleep
  // ends, for good. SIGCONT ends the stop, and clears it from every thread while it is pending.
  const auto after = read_process_state(pid);
  const bool left_stopped =
      after && (after->state == 'T' || after->state == 't') && after->tracer == 0;
  if (after && !was_stopped && (left_stopped || killed)) {
    ::kill(pid, SIGCONT);
    stack.notes.push_back(
        left_stopped
            ? fmt::format("process {} was left stopped ({}): sent SIGCONT", pid, after->state)
            : fmt::format("process {} (state {}) could hold the stop of a tool that did not end "
                          "by itself: sent SIGCONT",
                          pid, after->state));
  }
  return stack;
}

std::vector<Stack> collect_stacks(const std::vector<pid_t>& pids, const CollectOptions& options) {
  std::vector<Stack> stacks(pids.size());
  // A few at a time: each tool run is a process and a ptrace attach.
  const std::size_t width = std::min<std::size_t>(pids.size(), 8);
  std::vector<std::thread> workers;
  std::atomic<std::size_t> next{0};
  for (std::size_t w = 0; w < width; ++w) {
    workers.emplace_back([&] {
      for (std::size_t i; (i = next++) < pids.size();) stacks[i] = collect_stack(pids[i], options);
    });
  }
  for (auto& w : workers) w.join();
  return stacks;
}

}  // namespace trainrun::stacks
