#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "agent.hpp"
#include "config.hpp"
#include "worker_env.hpp"

namespace launch = trainrun::launch;

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    auto outcome = launch::parse_command_line(args, launch::current_environment());
    if (outcome.help_text) {
      std::fputs(outcome.help_text->c_str(), stdout);
      return 0;
    }
    return launch::run_agent(outcome.config);
  } catch (const launch::UsageError& e) {
    std::fprintf(stderr, "trainrun: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrun: internal error: %s\n", e.what());
    return 1;
  }
}
