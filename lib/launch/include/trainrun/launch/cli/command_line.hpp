#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/cli/config_file.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/hosts/hosts_options.hpp"

namespace trainrun::launch {

// Parses a command line (argv[0] excluded) with PET_* defaults read from `env`, the values of a
// --config file (config_file.hpp) read through `read_config_text`, and inside a Slurm step (or
// with --slurm) the job's layout from its SLURM_* variables (slurm.hpp). Pure but for that file:
// it reads nothing else (no other file, variable, program or limit of the machine: main takes
// check_machine_limits next, worker_count.hpp), so it is fuzzed and tested as a function. Throws
// UsageError with a one-line reason on bad input. `--help`, `--help-all`, `--version` and
// `--print-config` are reported through `help_text` (then the returned config is meaningless and
// main exits 0); the help is wrapped to help_width(env, terminal_width) (cli_docs.hpp), where
// `terminal_width` is that of the terminal stdout is, if it is one.
// `warnings` name the options that were accepted but change nothing here; main prints them.
// `notes` say where values came from other than the command line and PET_* (a Slurm step,
// slurm.hpp: one line naming each value taken); main prints them too.
struct ParseOutcome {
  LaunchConfig config;
  std::optional<std::string> help_text;
  std::vector<std::string> warnings;
  std::vector<std::string> notes = {};
  // --hosts or --hostfile: main runs the job on those hosts (hosts_launcher.hpp), not here.
  std::optional<HostsOptions> hosts = {};
};
// How the --config file is read: from disk (read_config_file), or as tests and the fuzzer say.
using ConfigReader = std::function<std::string(const std::string& path)>;
ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env,
                                const ConfigReader& read_config_text = read_config_file,
                                std::optional<int> terminal_width = std::nullopt);

// One option as --help shows it, for the man page and the completion scripts (cli_docs.hpp):
// read from the same CLI11 table that parses the command line, so they cannot drift apart.
struct OptionDoc {
  std::vector<std::string> names;  // "-r", "--redirects", "--redirects": short names first
  bool takes_value = false;
  std::string group;
  std::string summary;  // --help's line; empty: only named at the end of its group there
  std::string help;     // as --help-all prints it, "[env PET_...]" included
  std::string default_value;
  // The words the value is one of, as the parser reads them ("static", "c10d", ...); empty for a
  // path or a free text. A list is comma-separated words (-r 0:1,1:3 for the per-rank form).
  std::vector<std::string> values = {};
  bool value_list = false;
};
std::vector<OptionDoc> option_docs();
}  // namespace trainrun::launch
