#include "trainrun/launch/workers/python_exec.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "trainrun/base/process.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"
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

namespace {

// PREFIX/bin/python3 (or python) where it is an interpreter; "" otherwise.
std::string python_in(const std::string& prefix) {
  for (const char* name : {"/bin/python3", "/bin/python"})
    if (is_executable_file(prefix + name)) return prefix + name;
  return "";
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::optional<std::pair<std::string, PythonSource>> environment_python(
    const std::map<std::string, std::string>& env, const std::string& self_exe) {
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    auto it = env.find(variable);
    if (it == env.end() || it->second.empty()) continue;
    if (std::string python = python_in(it->second); !python.empty())
      return std::make_pair(python, PythonSource::activated);
  }
  // trainrun in PREFIX/bin of a virtual environment or a conda environment (the wheel's case);
  // not /usr/bin, whose python3 is no more the user's choice than PATH's.
  const auto slash = self_exe.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string bin = self_exe.substr(0, slash);
  if (bin.size() < 4 || bin.compare(bin.size() - 4, 4, "/bin") != 0) return std::nullopt;
  const std::string prefix = bin.substr(0, bin.size() - 4);
  if (!exists(prefix + "/pyvenv.cfg") && !exists(prefix + "/conda-meta")) return std::nullopt;
  if (std::string python = python_in(prefix); !python.empty())
    return std::make_pair(python, PythonSource::own_environment);
  return std::nullopt;
}

std::string handed_python(const std::map<std::string, std::string>& env,
                          const std::string& self_exe, const std::string& cwd) {
  if (auto it = env.find("PYTHON_EXEC"); it != env.end() && !it->second.empty()) {
    const std::string& given = it->second;
    if (given.find('/') == std::string::npos || given[0] == '/') return given;
    return cwd + "/" + given;
  }
  auto chosen = environment_python(env, self_exe);
  return chosen ? chosen->first : "";
}

std::string python_source_text(PythonSource source) {
  switch (source) {
    case PythonSource::variable:
      return "from PYTHON_EXEC";
    case PythonSource::launcher:
      return "the --hosts launcher's choice";
    case PythonSource::activated:
      return "the activated environment";
    case PythonSource::own_environment:
      return "the environment trainrun is installed in";
    case PythonSource::path:
      break;
  }
  return "python3 from PATH, PYTHON_EXEC unset";
}

std::string python_line(const PythonExec& python) {
  return fmt::format("Python workers run {} ({}; {})", python.program,
                     python.version.empty() ? "version unknown" : "Python " + python.version,
                     python_source_text(python.source));
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
  if (python.source != PythonSource::path) which += ", " + python_source_text(python.source);
  return fmt::format(
      "rank {}'s Python ({}) has no module torch: set PYTHON_EXEC to the python of your "
      "environment, or activate it",
      rank, which);
}

}  // namespace trainrun::launch
