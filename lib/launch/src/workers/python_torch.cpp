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

std::optional<TorchVersion> parse_torch_version(std::string_view printed) {
  const std::string text = trim(printed);
  const size_t dot = text.find('.');
  if (dot == std::string::npos) return std::nullopt;
  size_t end = dot + 1;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  const std::optional<long long> major = parse_integer(text.substr(0, dot));
  const std::optional<long long> minor = parse_integer(text.substr(dot + 1, end - dot - 1));
  if (!major || !minor || *major < 0 || *major > 1000 || *minor < 0 || *minor > 1000)
    return std::nullopt;
  return TorchVersion{static_cast<int>(*major), static_cast<int>(*minor)};
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
