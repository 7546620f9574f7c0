#include "trainrun/launch/workers/python_torch.hpp"

#include <cctype>
#include <chrono>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/stacks/tool_run.hpp"

namespace trainrun::launch {

namespace {

// find_spec locates the package without running its __init__; version.py is plain assignments.
constexpr char kPrintTorchVersion[] =
    "import importlib.util as u, os, re\n"
    "s = u.find_spec('torch')\n"
    "if s and s.origin:\n"
    "    with open(os.path.join(os.path.dirname(s.origin), 'version.py')) as f:\n"
    "        m = re.search(r\"^__version__\\s*=\\s*['\\\"]([^'\\\"]+)\", f.read(), re.M)\n"
    "    print(m.group(1) if m else '')\n";

}  // namespace

std::optional<int> parse_torch_major(std::string_view printed) {
  const std::string text = trim(printed);
  const std::string major = text.substr(0, text.find('.'));
  if (major.empty() || text.find('.') == std::string::npos) return std::nullopt;
  const std::optional<long long> n = parse_integer(major);
  if (!n || *n < 0 || *n > 1000) return std::nullopt;
  return static_cast<int>(*n);
}

std::optional<std::string> python_torch_version(const std::string& python) {
  const stacks::ToolRun run =
      stacks::run_tool(python, {"-c", kPrintTorchVersion}, std::chrono::seconds(30), 4096);
  if (!run.started || run.timed_out || run.exit_code != 0) return std::nullopt;
  std::string version = trim(run.out);
  if (version.empty()) return std::nullopt;
  return version;
}

}  // namespace trainrun::launch
