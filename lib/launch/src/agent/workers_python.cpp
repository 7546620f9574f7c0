#include "workers_python.hpp"

#include <fmt/format.h>

#include "trainrun/launch/workers/python_torch.hpp"

namespace trainrun::launch {

WorkersPython::WorkersPython(const std::string& program, PythonSource source)
    : exec_{program, source, ""} {}

std::optional<TorchVersion> WorkersPython::inspect(
    const std::function<void(const std::string&, Level)>& say) {
  if (shown(Level::debug)) {
    version();
    say(python_line(exec_), Level::debug);
  }
  torch_version_ = python_torch_version(exec_.program).value_or("");
  const std::optional<TorchVersion> torch = parse_torch_version(torch_version_);
  say(torch ? fmt::format("{}: PyTorch {}.{}", exec_.program, torch->major, torch->minor)
            : exec_.program + ": no PyTorch version found; workers get torch 2.x's variables",
      Level::debug);
  return torch;
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
