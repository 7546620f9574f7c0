#include "trainrun/launch/workers/python_exec.hpp"

#include <fmt/format.h>

#include <chrono>

#include "trainrun/base/text.hpp"
#include "trainrun/stacks/tool_run.hpp"

namespace trainrun::launch {

namespace {

// An interpreter that takes longer than this to say its version is not asked again.
constexpr auto kVersionTimeout = std::chrono::seconds(5);

}  // namespace

std::string python_version(const std::string& program) {
  // stdout and stderr: Python 2 wrote its version to the latter.
  const stacks::ToolRun run = stacks::run_tool(program, {"--version"}, kVersionTimeout, 4096);
  const std::string out = run.out + run.err;
  const std::string prefix = "Python ";
  if (out.rfind(prefix, 0) != 0) return "";
  return trim(escape_control(out.substr(prefix.size(), out.find('\n') - prefix.size())));
}

std::string python_line(const PythonExec& python) {
  return fmt::format(
      "Python workers run {} ({}; {})", python.program,
      python.version.empty() ? "version unknown" : "Python " + python.version,
      python.from_variable ? "from PYTHON_EXEC" : "python3 from PATH, PYTHON_EXEC unset");
}

std::optional<int> rank_without_torch(const std::vector<ProcessFailure>& failures) {
  const std::string needle = "No module named 'torch'";
  for (const auto& f : failures)
    for (const std::string* text : {&f.stderr_tail, &f.message, &f.traceback})
      if (text->find(needle) != std::string::npos) return f.rank;
  return std::nullopt;
}

std::string missing_torch_hint(int rank, const PythonExec& python) {
  std::string which = python.program;
  if (!python.version.empty()) which += ", " + python.version;
  if (python.from_variable) which += ", from PYTHON_EXEC";
  return fmt::format(
      "rank {}'s Python ({}) has no module torch: set PYTHON_EXEC to the python of your "
      "environment, or activate it",
      rank, which);
}

}  // namespace trainrun::launch
