#include "agent_watch.hpp"

#include <fmt/format.h>

#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

std::string hang_text(const HangReport& report, double timeout_s) {
  return launcher_line(fmt::format("the job is hung: no worker made progress for {:.0f} s "
                                   "(--hang-timeout={:g}) and no rank's stack moved in {} s: {}",
                                   report.json.value("quiet_s", 0.0), timeout_s,
                                   kHangConfirmGap.count(), report.line),
                       Level::error) +
         report.text;
}

HangFailure hang_failure(const HangReport& report, std::string text, const std::string& host,
                         double unix_now, const std::string& report_file) {
  HangFailure out{std::move(text), report.json, {}};
  if (!report_file.empty()) out.hang["report_file"] = report_file;
  ProcessFailure& failure = out.failure;
  failure.rank = report.rank;
  failure.local_rank = report.local_rank;
  failure.pid = report.pid;
  failure.host = report.host.empty() ? host : report.host;
  failure.status = ExitStatus{kHangExitCode, 0};
  failure.timestamp = unix_now;
  failure.message = "hung: " + report.line;
  failure.traceback = failure.message;
  // The report stands as its error file: the summary shows the line, not a rank's stderr.
  failure.has_error_file = !report_file.empty();
  if (!report_file.empty()) failure.error_file = report_file;
  return out;
}

AgentWatch::AgentWatch(boost::asio::io_context& io, const std::map<std::string, std::string>& env,
                       JobEntry entry, double hang_timeout_s, const std::string& heartbeat_file,
                       Hooks hooks, RaiseEvent raise)
    : hooks_(std::move(hooks)), raise_(std::move(raise)), host_(entry.host) {
  // `trainrun --stacks` finds this job by its registration; a job that cannot register still
  // runs, unless it asked for --hang-timeout, which cannot confirm a hang without the roll call.
  try {
    registry_ = std::make_unique<RegistryDir>(::geteuid(), env);
    if (!registry_->note().empty()) hooks_.say(registry_->note(), Level::warning);
    roll_call_ = std::make_unique<RollCall>(io, registry_->path(), std::move(entry),
                                            [this] { return workers(); });
  } catch (const LaunchError& e) {
    if (hang_timeout_s > 0)
      throw SetupError(
          fmt::format("--hang-timeout needs the roll call, which cannot start: {}", e.what()));
    hooks_.say(fmt::format("trainrun --stacks cannot reach this job: {}", e.what()),
               Level::warning);
  }
  if (hang_timeout_s <= 0) return;
  heartbeat_file_ = heartbeat_file;
  start_hang_watch(io, hang_timeout_s);
}

AgentWatch::~AgentWatch() = default;

// --hang-timeout: progress is any worker's output (every stream then passes through trainrun),
// a touch of the heartbeat file, a file-timer request; a hang is confirmed with the roll call.
void AgentWatch::start_hang_watch(boost::asio::io_context& io, double timeout_s) {
  try {
    write_file_atomically(heartbeat_file_, "", /*durable=*/false);
  } catch (const std::exception& e) {
    hooks_.say(fmt::format("--hang-timeout: no heartbeat file for the workers: {}", e.what()),
               Level::warning);
    heartbeat_file_.clear();
  }
  HangWatch::Hooks hooks;
  hooks.roll_call = [this](HangWatch::Reply done) { roll_call_->job_reply(std::move(done)); };
  hooks.hung = [this](const HangReport& report) { on_hang(report); };
  hooks.say = hooks_.say;
  hang_watch_ = std::make_unique<HangWatch>(io, timeout_s, heartbeat_file_, std::move(hooks));
}

NodeWorkers AgentWatch::workers() const {
  NodeWorkers node = hooks_.workers();
  if (hang_watch_) node.quiet_s = hang_watch_->quiet_s();
  return node;
}

void AgentWatch::on_hang(const HangReport& report) {
  // The stacks of a hang are the user's to read, whatever comes after it (a restart that succeeds).
  if (roll_call_) roll_call_->keep_dumps();
  std::string text = hang_text(report, hang_watch_->timeout_s());
  const std::string& file = report_file_;
  bool written = false;
  try {
    write_file_atomically(file, text);
    written = true;
  } catch (const std::exception& e) {
    hooks_.say(fmt::format("the hang report could not be written: {}", e.what()), Level::warning);
  }
  raise_(event::HangConfirmed{
      hang_failure(report, std::move(text), host_, unix_time(), written ? file : "")});
}

void AgentWatch::progress() {
  if (hang_watch_) hang_watch_->progress();
}

bool AgentWatch::suspected() const { return hang_watch_ && hang_watch_->suspected(); }

void AgentWatch::set_node_rank(int node_rank) {
  if (roll_call_) roll_call_->set_node_rank(node_rank);
}

void AgentWatch::set_ask_others(RollCall::AskOthers ask) {
  if (roll_call_) roll_call_->set_ask_others(std::move(ask));
}

std::vector<std::string> AgentWatch::unasked_dumps() const {
  return roll_call_ ? roll_call_->unasked_dumps() : std::vector<std::string>{};
}

void AgentWatch::answer(std::function<void(std::string)> reply, std::size_t max_bytes) {
  if (!roll_call_) return reply(R"({"error": "this node's agent could not start its roll call"})");
  roll_call_->answer([reply = std::move(reply), max_bytes](nlohmann::json mine) {
    reply(fit_node_answer(std::move(mine), max_bytes));
  });
}

void AgentWatch::start(std::string report_file) {
  report_file_ = std::move(report_file);
  if (hang_watch_) hang_watch_->start();
}

void AgentWatch::stop() {
  if (hang_watch_) hang_watch_->stop();
}

void AgentWatch::close() {
  if (roll_call_) roll_call_->close();
  stop();
}

}  // namespace trainrun::launch
