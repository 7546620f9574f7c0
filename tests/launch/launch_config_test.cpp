#include "trainrun/launch/core/launch_config.hpp"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <string>

#include "parse_helpers.hpp"

using namespace trainrun::launch;
using trainrun::test::parse;

namespace {

template <typename T>
std::string text(const std::optional<T>& o);
template <typename T>
std::string text(const std::vector<T>& items);

std::string text(bool b) { return b ? "true" : "false"; }
std::string text(int n) { return std::to_string(n); }
std::string text(double d) { return fmt::format("{}", d); }
std::string text(const std::string& s) { return "'" + s + "'"; }
template <typename Enum, typename = std::enable_if_t<std::is_enum_v<Enum>>>
std::string text(Enum e) {
  return "enum " + std::to_string(static_cast<int>(e));
}
std::string text(trainrun::rendezvous::Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
}
template <typename T>
std::string text(const std::optional<T>& o) {
  return o ? text(*o) : "none";
}
template <typename T>
std::string text(const std::vector<T>& items) {
  std::string out = "[";
  for (const auto& item : items) out += (out.size() > 1 ? "," : "") + text(item);
  return out + "]";
}
// The count and its kind; `source` only names where a value came from, for its errors.
std::string text(const WorkerCount& w) { return text(w.kind) + " " + text(w.number); }
std::string text(const StdSpec& s) {
  std::string out = text(s.all_ranks) + " map=" + text(s.is_map);
  for (const auto& [rank, std] : s.per_rank) out += fmt::format(" {}:{}", rank, text(std));
  return out;
}
std::string text(const RendezvousConf& conf) {
  const auto& [join, last_call, liveness, is_host, token, rdzv_port] = conf;
  const auto& [keep_alive, heartbeat] = liveness;
  const auto& [file, any_mode, handed_over] = token;
  return fmt::format(
      "join={} last_call={} keep_alive={} heartbeat={} is_host={} file={} "
      "any_mode={} handed_over={} rdzv_port={}",
      text(join), text(last_call), text(keep_alive), text(heartbeat), text(is_host), text(file),
      text(any_mode), text(handed_over), text(rdzv_port));
}

// Every field of a configuration, one per line. The binding names every member: a field added to
// LaunchConfig stops this from compiling until it is written here too, so no comparison misses it.
std::string describe(const LaunchConfig& c) {
  const auto& [min_nodes, max_nodes, nproc_per_node, node_rank, node_rank_given, master_addr,
               master_port, master_port_given, rdzv_backend, rdzv_endpoint, rdzv_id, rdzv_conf,
               standalone, max_restarts, monitor_interval, role, module, no_python, log_dir,
               redirects, tee, local_ranks_filter, local_addr, shutdown_timeout, hang_timeout,
               no_diagnosis, exit_grace, stop_signals, forward_signals, signals_to_handle,
               log_line_prefix_template, duplicate_stdout_filters, duplicate_stderr_filters,
               virtual_local_rank, event_log_handler, numa_binding, preflight, preload, verbosity,
               log_timestamps, summary_file, entry_mode, python_exec, python_source, entrypoint,
               entry_args] = c;
  std::string out;
#define TRAINRUN_FIELD(name) out += #name "=" + text(name) + "\n"
  TRAINRUN_FIELD(min_nodes);
  TRAINRUN_FIELD(max_nodes);
  TRAINRUN_FIELD(nproc_per_node);
  TRAINRUN_FIELD(node_rank);
  TRAINRUN_FIELD(node_rank_given);
  TRAINRUN_FIELD(master_addr);
  TRAINRUN_FIELD(master_port);
  TRAINRUN_FIELD(master_port_given);
  TRAINRUN_FIELD(rdzv_backend);
  TRAINRUN_FIELD(rdzv_endpoint);
  TRAINRUN_FIELD(rdzv_id);
  TRAINRUN_FIELD(rdzv_conf);
  TRAINRUN_FIELD(standalone);
  TRAINRUN_FIELD(max_restarts);
  TRAINRUN_FIELD(monitor_interval);
  TRAINRUN_FIELD(role);
  TRAINRUN_FIELD(module);
  TRAINRUN_FIELD(no_python);
  TRAINRUN_FIELD(log_dir);
  TRAINRUN_FIELD(redirects);
  TRAINRUN_FIELD(tee);
  TRAINRUN_FIELD(local_ranks_filter);
  TRAINRUN_FIELD(local_addr);
  TRAINRUN_FIELD(shutdown_timeout);
  TRAINRUN_FIELD(hang_timeout);
  TRAINRUN_FIELD(no_diagnosis);
  TRAINRUN_FIELD(exit_grace);
  TRAINRUN_FIELD(stop_signals);
  TRAINRUN_FIELD(forward_signals);
  TRAINRUN_FIELD(signals_to_handle);
  TRAINRUN_FIELD(log_line_prefix_template);
  TRAINRUN_FIELD(duplicate_stdout_filters);
  TRAINRUN_FIELD(duplicate_stderr_filters);
  TRAINRUN_FIELD(virtual_local_rank);
  TRAINRUN_FIELD(event_log_handler);
  TRAINRUN_FIELD(numa_binding);
  TRAINRUN_FIELD(preflight);
  TRAINRUN_FIELD(preload);
  TRAINRUN_FIELD(verbosity);
  TRAINRUN_FIELD(log_timestamps);
  TRAINRUN_FIELD(summary_file);
  TRAINRUN_FIELD(entry_mode);
  TRAINRUN_FIELD(python_exec);
  TRAINRUN_FIELD(python_source);
  TRAINRUN_FIELD(entrypoint);
  TRAINRUN_FIELD(entry_args);
#undef TRAINRUN_FIELD
  return out;
}

}  // namespace

TEST_CASE("a default LaunchConfig is the job of a command line without options") {
  // `trainrun x` runs x as a program when it is one (entry mode executable, as in LaunchConfig{}).
  LaunchConfig expected;
  expected.entrypoint = "x";
  CHECK(describe(parse({"x"})) == describe(expected));
  expected.no_python = true;
  CHECK(describe(parse({"--no-python", "x"})) == describe(expected));
}

TEST_CASE("--standalone is standalone_job, the one meaning a program that builds its job uses") {
  LaunchConfig expected = standalone_job(LaunchConfig());
  expected.entrypoint = "x";
  expected.no_python = true;
  CHECK(describe(parse({"--standalone", "--no-python", "x"})) == describe(expected));
  CHECK(expected.standalone);
}
