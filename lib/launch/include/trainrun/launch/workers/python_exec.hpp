#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/launch/core/failure.hpp"
#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// Which Python runs the workers: `program`, the interpreter resolved from `source`.
struct PythonExec {
  std::string program;
  PythonSource source = PythonSource::path;
  std::string version;  // "3.11.2"; empty when it could not be asked
};

// The interpreter of the activated environment (VIRTUAL_ENV, else CONDA_PREFIX: its bin/python3
// or bin/python), else of the environment trainrun itself is installed in (`self_exe` in
// PREFIX/bin, where PREFIX holds pyvenv.cfg or conda-meta: `venv/bin/trainrun` runs
// `venv/bin/python3`, as torchrun runs its own sys.executable), with its source; nothing where
// neither applies (python3 from PATH then). PYTHON_EXEC is the caller's to check first.
std::optional<std::pair<std::string, PythonSource>> environment_python(
    const std::map<std::string, std::string>& env, const std::string& self_exe);

// The interpreter a --hosts launcher hands to its agents, who use it where it exists: the one
// its user chose here (PYTHON_EXEC, a relative path made absolute against `cwd`; else
// environment_python()); "" where the choice is PATH's python3, which each host makes itself.
std::string handed_python(const std::map<std::string, std::string>& env,
                          const std::string& self_exe, const std::string& cwd);

// How a -v line or a hint says where the interpreter came from ("python3 from PATH, PYTHON_EXEC
// unset", "the activated environment", ...).
std::string python_source_text(PythonSource source);

// Asks `program --version` (bounded by a few seconds; empty when it does not answer "Python X").
// Blocks: call it outside the event loop's busy paths (at -v, or once after a failure).
std::string python_version(const std::string& program);

// The -v line: "Python workers run /usr/bin/python3 (Python 3.11.2; python3 from PATH, PYTHON_EXEC
// unset)".
std::string python_line(const PythonExec& python);

// The rank of the first failure whose stderr or error file says the interpreter has no torch
// ("No module named 'torch'"), if any.
std::optional<int> rank_without_torch(const std::vector<ProcessFailure>& failures);

// "rank 0's Python (/usr/bin/python3, 3.11.2) has no module torch: set PYTHON_EXEC to the python
// of your environment, or activate it".
std::string missing_torch_hint(int rank, const PythonExec& python);

}  // namespace trainrun::launch
