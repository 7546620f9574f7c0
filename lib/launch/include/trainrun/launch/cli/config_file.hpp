#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainrun::launch {

// trainrun's configuration file (`--config job.toml`): TOML, one key per long option, as
// docs/cli.md, section "Configuration file", describes. Pure but for read_config_file.

// One option of the file: its value as the command line would give it ("8", "1:2", a flag's
// "true" or "false"), and the line it is on, for error messages.
struct ConfigEntry {
  std::string value;
  int line = 0;
};

// The entries of `text`, keyed by the option's dashed name. `options` maps each dashed name the
// file may set to whether it takes a value (false: a flag). A key may be spelled with '-' or '_',
// as on the command line. Throws UsageError naming `path` and the line: not TOML, an unknown key
// (with "did you mean"), one option given twice, or a value of the wrong type (a flag takes true
// or false; an option a string or a number).
using ConfigEntries = std::map<std::string, ConfigEntry>;
ConfigEntries parse_config(const std::string& text, const std::string& path,
                           const std::map<std::string, bool>& options);

// The file's text; throws UsageError naming `path` and the reason when it cannot be read.
std::string read_config_file(const std::string& path);

// One option as a line of such a file ("nproc-per-node = 8", "standalone = true"), the value
// written as TOML (a number when it reads back as the same text, else a string).
std::string config_line(const std::string& name, const std::string& value, bool is_flag);

}  // namespace trainrun::launch
