#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainrun/launch/core/job.hpp"

namespace trainrun::launch {

// The major version in what `python -c` printed for torch's version ("1.13.0a0", "2.15.0+cu132"):
// nothing when it printed none (no torch there).
std::optional<TorchVersion> parse_torch_version(std::string_view printed);

// The version of the PyTorch that the interpreter `python` (a path) would import ("2.15.0+cu132"),
// read from torch/version.py without importing torch (a fraction of a second, not torch's import
// time): nothing when it has no torch or cannot say within a generous bound.
std::optional<std::string> python_torch_version(const std::string& python);

}  // namespace trainrun::launch
