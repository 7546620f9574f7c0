#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "trainrun/launch/core/job.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/workers/python_exec.hpp"

namespace trainrun::launch {

// The interpreter that runs the Python workers (`program`, resolved from `source`), asked about
// only where something needs it: its version, once, and the PyTorch it would import.
class WorkersPython {
 public:
  WorkersPython(const std::string& program, PythonSource source);

  // Says (at debug level, asking only when that is shown) which interpreter runs the workers,
  // and which PyTorch they will import; returns its major version, for the variables only
  // torch 1.x needs (nothing: the workers get torch 2.x's).
  std::optional<TorchVersion> inspect(const std::function<void(const std::string&, Level)>& say);
  // The interpreter's version ("" when it does not answer), asked the first time it is needed.
  const std::string& version();
  // The interpreter, as the workers' argv[0] names it.
  const std::string& program() const { return exec_.program; }
  // The version of the torch inspect() found ("" when none).
  const std::string& torch_version() const { return torch_version_; }
  // Why rank `rank` found no module torch, and what to do.
  std::string missing_torch_hint(int rank);

 private:
  PythonExec exec_;
  std::string torch_version_;
};

}  // namespace trainrun::launch
