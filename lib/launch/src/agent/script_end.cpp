#include "script_end.hpp"

#include <fmt/format.h>
#include <signal.h>

namespace trainrun::launch {

ExitStatus script_status(const ScriptReturn& script) {
  if (script.how == "exception" && script.code == 128 + SIGINT) return {0, SIGINT};
  return {script.code, 0};
}

std::string script_over(int rank, const ScriptReturn& script) {
  if (script.how == "exit")
    return fmt::format("rank {}'s script exited with {}", rank, script.code);
  if (script.how == "exception")
    return fmt::format("rank {}'s script raised {}", rank,
                       script.code == 128 + SIGINT ? "KeyboardInterrupt" : "an exception");
  return fmt::format("rank {}'s script returned", rank);
}

std::string not_exited_line(int rank, double seconds, const std::string& where) {
  return fmt::format("rank {} finished its script {:.0f} s ago and has not exited: it is in {}",
                     rank, seconds, where.empty() ? "a place its stack does not show" : where);
}

EndAfterScript end_after_script(int rank, const ExitStatus& process, const ScriptReturn& script,
                                bool ended_by_grace, const std::string& where, double grace_s,
                                bool stopping) {
  const ExitStatus asked = script_status(script);
  if (ended_by_grace)
    return {asked, fmt::format("{}; the process had not exited {:g} s later (it was in {}), so "
                               "trainrun ended it",
                               script_over(rank, script), grace_s,
                               where.empty() ? "a place its stack does not show" : where)};
  if (stopping || process.signal == 0 || process.signal == asked.signal) return {process, ""};
  const std::string what = process.signal == SIGABRT ? "aborted" : "was killed";
  return {asked, fmt::format("{}; the interpreter {} in teardown ({})", script_over(rank, script),
                             what, signal_name(process.signal))};
}

}  // namespace trainrun::launch
