#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/workers/failure.hpp"

namespace trainrun::launch {

// Which Python runs the workers: `program`, the interpreter resolved from PYTHON_EXEC or the
// `python3` on PATH; `from_variable` when PYTHON_EXEC named it.
struct PythonExec {
  std::string program;
  bool from_variable = false;
  std::string version;  // "3.11.2"; empty when it could not be asked
};

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
