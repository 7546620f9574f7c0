#include "trainrun/launch/cli/config_file.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "option_values.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

namespace {

std::string type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date or time";
  }
}

// A configuration file is a few lines: anything this long is not one (/dev/zero, a data file).
constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

}  // namespace

ConfigEntries parse_config(const std::string& text, const std::string& path,
                           const std::map<std::string, bool>& options) {
  auto fail = [&](int line, const std::string& what) {
    throw UsageError(fmt::format("{}:{}: {}", path, line, what));
  };
  toml::table table;
  try {
    table = toml::parse(std::string_view(text), std::string_view(path));
  } catch (const toml::parse_error& e) {
    fail(static_cast<int>(e.source().begin.line),
         "not valid TOML: " + escape_control(e.description()));
  }
  std::vector<std::string> names;
  for (const auto& [name, takes_value] : options) names.push_back(name);
  ConfigEntries entries;
  for (const auto& [key, node] : table) {
    const int line = static_cast<int>(key.source().begin.line);
    const std::string written = escape_control(key.str());
    const std::string name = dashed(std::string(key.str()));
    auto option = options.find(name);
    if (option == options.end()) {
      const std::string best = closest_word(name, names);
      fail(line, fmt::format("unknown key '{}'{} (the keys are trainrun's long option names, see "
                             "trainrun --help)",
                             written, best.empty() ? "" : "; did you mean " + best + "?"));
    }
    if (auto seen = entries.find(name); seen != entries.end())
      fail(line, fmt::format("{} is given twice (also on line {})", written, seen->second.line));
    ConfigEntry entry{"", line};
    if (!option->second) {
      if (!node.is_boolean())
        fail(line,
             fmt::format("{}: expected true or false, got {}", written, type_name(node.type())));
      entry.value = node.as_boolean()->get() ? "true" : "false";
    } else if (node.is_string()) {
      entry.value = node.as_string()->get();
    } else if (node.is_integer()) {
      entry.value = std::to_string(node.as_integer()->get());
    } else if (node.is_floating_point()) {
      // Written as a float, so that the option's own parser (the command line's) decides: `2.0`
      // for --nproc-per-node is refused here as it is there.
      entry.value = fmt::format("{}", node.as_floating_point()->get());
      if (entry.value.find_first_of(".eninf") == std::string::npos) entry.value += ".0";
    } else {
      fail(line, fmt::format("{}: expected a string or a number, got {}", written,
                             type_name(node.type())));
    }
    entries[name] = entry;
  }
  return entries;
}

std::string read_config_file(const std::string& path) {
  try {
    return read_regular_file(path, kMaxConfigBytes);
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("--config={}: cannot read it: {}", path, e.what()));
  }
}

std::string config_line(const std::string& name, const std::string& value, bool is_flag) {
  toml::table line;
  const std::optional<long long> number = parse_integer(value);
  if (is_flag)
    line.insert(name, value == "true");
  else if (number && std::to_string(*number) == value)
    line.insert(name, *number);
  else
    line.insert(name, value);
  std::ostringstream out;
  out << line;
  return out.str();
}

}  // namespace trainrun::launch
