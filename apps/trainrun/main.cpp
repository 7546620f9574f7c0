#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "trainrun/launch/agent/agent.hpp"
#include "trainrun/launch/cli/cli_docs.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/hosts/hosts_launcher.hpp"
#include "trainrun/launch/hosts/remote_agent.hpp"
#include "trainrun/launch/rollcall/stacks_command.hpp"
#include "trainrun/launch/workers/descriptors.hpp"
#include "trainrun/launch/workers/worker_count.hpp"
#include "trainrun/launch/workers/worker_env.hpp"

namespace launch = trainrun::launch;

// The one place where an error becomes an exit status: each launcher error carries its own.
int main(int argc, char** argv) {
  // Before anything is opened: connections to a rendezvous this node hosts must not take the
  // descriptors its workers need (see descriptors.hpp).
  launch::raise_descriptor_limit();
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    // An agent that a --hosts launcher started over ssh: its token and variables come first.
    const auto remote = launch::take_remote_agent(args);
    if (auto selector = launch::stacks_selector(args))
      return launch::run_stacks_command(*selector, launch::current_environment());
    auto outcome =
        launch::parse_command_line(args, launch::current_environment(), launch::read_config_file,
                                   launch::terminal_width(STDOUT_FILENO));
    if (outcome.help_text) {
      std::fputs(outcome.help_text->c_str(), stdout);
      return 0;
    }
    launch::check_machine_limits(outcome.config);
    launch::set_log_format({outcome.config.verbosity, outcome.config.log_timestamps});
    for (const auto& warning : outcome.warnings) launch::say(warning, launch::Level::warning);
    for (const auto& note : outcome.notes) launch::say(note);
    if (outcome.hosts) {
      if (remote)
        throw launch::UsageError("--hosts: an agent started by --hosts cannot start others");
      return launch::run_hosts(*outcome.hosts, outcome.config, launch::current_environment());
    }
    if (remote) {
      outcome.config.rdzv_conf.token.handed_over = remote->token;
      std::string note;
      launch::use_launcher_python(outcome.config, remote->python, &note);
      if (!note.empty()) launch::say(note, launch::Level::warning);
      return launch::run_agent(outcome.config, launch::take_launcher_channel());
    }
    return launch::run_agent(outcome.config);
  } catch (const launch::LaunchError& e) {
    launch::say(e.what(), launch::Level::error);
    return e.exit_code();
  } catch (const std::exception& e) {
    launch::say(std::string("internal error: ") + e.what(), launch::Level::error);
    return 1;
  }
}
