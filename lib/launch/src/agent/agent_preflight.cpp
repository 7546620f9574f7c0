#include "agent_preflight.hpp"

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <chrono>

#include "trainrun/base/wording.hpp"
#include "trainrun/launch/preflight/preflight_probe.hpp"
#include "trainrun/launch/preflight/preflight_run.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

LocalRun preflight_local_run(const LaunchConfig& config, const std::string& program,
                             const std::string& python, const std::string& torch) {
  LocalRun run;
  run.entrypoint = config.entrypoint;
  if (config.entry_mode == EntryMode::python_script)
    run.entrypoint_file = config.entrypoint;
  else if (config.entry_mode == EntryMode::executable)
    run.entrypoint_file = program;
  run.python = python;
  run.torch = torch;
  return run;
}

AgentPreflight::AgentPreflight(asio::io_context& io, PreflightMode mode) : io_(io), mode_(mode) {}

AgentPreflight::~AgentPreflight() = default;

void AgentPreflight::open(const LocalRun& run, Hooks hooks, RaiseEvent raise) {
  hooks_ = std::move(hooks);
  raise_ = std::move(raise);
  try {
    offer_ = local_offer(0, run);
    listener_ = std::make_unique<PreflightListener>(io_, offer_->id);
    offer_->port = listener_->port();
  } catch (const std::exception& e) {
    offer_.reset();
    hooks_.say(fmt::format("the preflight cannot open its port ({}); the other nodes will not "
                           "check this one",
                           e.what()),
               Level::warning);
  }
}

bool AgentPreflight::start(const rendezvous::Assignment& a, const PreflightNode& me,
                           const std::string& log_dir) {
  if (!offer_ || a.preflight.empty()) return false;
  drop();
  PreflightJob job;
  job.me = me;
  job.assignment = a;
  job.mine = *offer_;
  job.mode = mode_;
  job.log_dir = log_dir;
  const auto started = Clock::now();
  const std::uint64_t run = ++runs_;
  run_ = PreflightRun::start(io_, std::move(job), [this, a, me, started, run](auto findings) {
    // Not from inside the run's own callback: it is dropped here. A stop, restart or halt that
    // came meanwhile dropped it already, as did the job's end (the loop may be past it).
    asio::post(io_, [this, a, me, started, run, findings = std::move(findings)] {
      if (run != runs_ || !run_) return;
      run_.reset();
      finish(a, me, findings, Clock::now() - started);
    });
  });
  return true;
}

void AgentPreflight::finish(const rendezvous::Assignment& a, const PreflightNode& me,
                            const std::vector<PreflightFinding>& findings,
                            std::chrono::nanoseconds took) {
  bool failed = false;
  for (const auto& f : findings) {
    if (f.error)
      failed = true;
    else
      hooks_.say("preflight: " + f.line, Level::warning);
  }
  // The stop that follows says the line on every node, this one included.
  if (failed) return hooks_.failed(preflight_failure(me, findings));
  hooks_.say(fmt::format("preflight passed: {} checked, MASTER_ADDR {} ({:.1f} ms)",
                         count_of(static_cast<long long>(a.preflight.size()), "node"),
                         a.master_addr, std::chrono::duration<double, std::milli>(took).count()),
             Level::debug);
  raise_(event::Assignment{a});
}

void AgentPreflight::drop() {
  ++runs_;
  if (run_) run_->cancel();
  run_.reset();
}

void AgentPreflight::close() {
  drop();
  listener_.reset();
}

}  // namespace trainrun::launch
