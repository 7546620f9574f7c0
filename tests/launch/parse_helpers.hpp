#pragma once

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "trainrun/launch/cli/command_line.hpp"

namespace trainrun::test {

// What the launcher's parser makes of `args` with environment `env`.
inline launch::ParseOutcome outcome(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env = {}) {
  return launch::parse_command_line(args, env);
}

// The configuration of a command line that launches (neither --help nor --version).
inline launch::LaunchConfig parse(const std::vector<std::string>& args,
                                  const std::map<std::string, std::string>& env = {}) {
  launch::ParseOutcome out = outcome(args, env);
  REQUIRE_FALSE(out.help_text);
  return out.config;
}

}  // namespace trainrun::test
