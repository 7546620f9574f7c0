#include "workers_python.hpp"

#include <fmt/format.h>

#include "trainrun/launch/workers/python_torch.hpp"

namespace trainrun::launch {

WorkersPython::WorkersPython(const std::string& program, PythonSource source)
    : exec_{program, source, ""} {}

std::optional<int> WorkersPython::inspect(
    const std::function<void(const std::string&, Level)>& say) {
  if (shown(Level::debug)) {
    version();
    say(python_line(exec_), Level::debug);
  }
  torch_version_ = python_torch_version(exec_.program).value_or("");
  const std::optional<int> major = parse_torch_major(torch_version_);
  say(major ? fmt::format("{}: PyTorch {}.x", exec_.program, *major)
            : exec_.program + ": no PyTorch version found; workers get torch 2.x's variables",
      Level::debug);
  return major;
}

const std::string& WorkersPython::version() {
  if (exec_.version.empty()) exec_.version = python_version(exec_.program);
  return exec_.version;
}

std::string WorkersPython::missing_torch_hint(int rank) {
  version();
  return launch::missing_torch_hint(rank, exec_);
}

}  // namespace trainrun::launch
