#include "trainrun/launch/rollcall/stack_collector.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <memory>
#include <utility>

#include "trainrun/stacks/parse.hpp"
#include "worker_diagnosis.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

namespace {

// How long the workers of one collection may take to answer on their channels, all together: a
// worker whose interpreter cannot run its thread (a C call that holds the GIL) costs no more.
constexpr std::chrono::milliseconds kDiagnosisTimeout{5000};
// Each one at most.
constexpr std::chrono::milliseconds kDiagnosisEachTimeout{2000};

// A worker's Python threads, as its channel gave them (innermost frame first), as a stack of
// ours: what py-spy would have given without native frames.
std::vector<stacks::Thread> python_threads(const nlohmann::json& threads, pid_t pid) {
  std::vector<stacks::Thread> out;
  for (const auto& t : threads) {
    stacks::Thread thread;
    thread.tid = t.value("main", false) ? pid : 0;
    thread.name = t.value("name", "");
    for (const auto& f : t.at("frames")) {
      stacks::Frame frame;
      frame.file = f.at(0).get<std::string>();
      frame.line = f.at(1).get<int>();
      frame.function = f.at(2).get<std::string>();
      frame.kind = stacks::FrameKind::python;
      thread.frames.push_back(std::move(frame));
    }
    if (stacks::keep_workers_frames(thread)) out.push_back(std::move(thread));
  }
  return out;
}

StackCollector::Collected diagnose_and_collect(const std::vector<StackCollector::Target>& targets,
                                               const stacks::CollectOptions& options) {
  StackCollector::Collected result;
  std::vector<Diagnosis> diagnoses(targets.size());
  const auto deadline = std::chrono::steady_clock::now() + kDiagnosisTimeout;
  std::vector<pid_t> pids;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    pids.push_back(targets[i].pid);
    if (targets[i].diagnosis < 0) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    // The collector's end stops the asking too: at most one worker's wait remains.
    const bool stopped = options.stop && options.stop->load();
    diagnoses[i] = left.count() > 0 && !stopped
                       ? ask_diagnosis(targets[i].diagnosis, std::min(left, kDiagnosisEachTimeout))
                       : Diagnosis{nullptr, "no answer in time"};
    ::close(targets[i].diagnosis);
  }
  result.stacks = stacks::collect_stacks(pids, options);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const Diagnosis& d = diagnoses[i];
    nlohmann::json recorder;
    if (targets[i].diagnosis >= 0) {
      if (!d.error.empty())
        recorder = {{"error", d.error}};
      else if (d.reply.contains("flight_recorder_error"))
        recorder = {{"error", d.reply["flight_recorder_error"]}};
      else
        recorder = d.reply.value("flight_recorder", nlohmann::json());
    }
    result.recorders.push_back(std::move(recorder));
    // py-spy could not read the stack (ptrace not allowed, or it is not installed): the worker's
    // own Python traceback of every thread, with /proc's states, is the stack, rather than a
    // native tool's frames of the interpreter or none at all.
    stacks::Stack& stack = result.stacks[i];
    if (stack.tool == "py-spy" || !d.reply.is_object() || !d.reply.contains("threads")) continue;
    try {
      std::vector<stacks::Thread> threads = python_threads(d.reply["threads"], stack.pid);
      // /proc's state of the main thread, which the worker's answer does not have.
      if (const stacks::Thread* main = stack.main_thread())
        for (auto& t : threads)
          if (t.tid == stack.pid)
            t.state = main->state, t.wchan = main->wchan, t.syscall = main->syscall;
      stack.threads = std::move(threads);
      stack.tool = "trainrun";
      // What a tool's note says would give the Python frames is given.
      stack.notes.erase(std::remove_if(stack.notes.begin(), stack.notes.end(),
                                       [](const std::string& note) {
                                         return note.find("Python frames") != std::string::npos;
                                       }),
                        stack.notes.end());
      stack.notes.push_back(
          "the Python threads as the workers themselves told them (their diagnosis channels); "
          "py-spy, where it may attach, would add the native frames");
    } catch (const nlohmann::json::exception& e) {
      stack.notes.push_back(
          fmt::format("the worker's own traceback could not be read: {}", e.what()));
    }
  }
  return result;
}

}  // namespace

StackCollector::StackCollector(asio::io_context& io, stacks::CollectOptions options)
    : options_(std::move(options)),
      off_loop_([&io](std::function<void()> f) { asio::post(io, std::move(f)); }) {
  options_.stop = &stop_;
}

// The running tool is killed within moments of the stop; off_loop_ then waits for its thread.
StackCollector::~StackCollector() { stop_ = true; }

namespace {

// The targets of a collection, whose diagnosis channels are closed by the collection or, where
// it never ran (dropped at the end), here.
struct OwnedTargets {
  std::vector<StackCollector::Target> targets;
  bool collected = false;
  ~OwnedTargets() {
    if (collected) return;
    for (auto& t : targets)
      if (t.diagnosis >= 0) ::close(t.diagnosis);
  }
};

}  // namespace

void StackCollector::collect(std::vector<Target> targets, Done done) {
  auto owned = std::make_shared<OwnedTargets>();
  owned->targets = std::move(targets);
  // The tools are reaped by the collector's thread, which starts them: the one reaper
  // (reaper.hpp) leaves a child its starter waits for to that starter.
  off_loop_.run(
      [this, owned] {
        owned->collected = true;
        return diagnose_and_collect(owned->targets, options_);
      },
      std::move(done));
}

}  // namespace trainrun::launch
