#include "leftovers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "trainrun/base/files.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::launch {

namespace {

constexpr size_t kNamed = 4;
constexpr size_t kMaxCommand = 80;

}  // namespace

std::string describe_process(pid_t pid) {
  // A command line may be megabytes long: read no more than is shown.
  std::string command =
      read_file_prefix(fmt::format("/proc/{}/cmdline", pid), kMaxCommand + 1).value_or("");
  while (!command.empty() && command.back() == '\0') command.pop_back();
  std::replace(command.begin(), command.end(), '\0', ' ');
  if (command.empty()) {
    command = read_file_prefix(fmt::format("/proc/{}/comm", pid), 64).value_or("");
    command = command.substr(0, command.find('\n'));
  }
  std::string shown = escape_control(utf8_prefix(command, kMaxCommand));
  if (command.size() > kMaxCommand) shown += "...";
  return fmt::format("pid {} ({})", pid, shown.empty() ? "?" : shown);
}

std::string leftovers_line(std::vector<pid_t> pids, double seconds_to_kill) {
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  std::string named;
  for (size_t i = 0; i < pids.size() && i < kNamed; ++i)
    named += (i == 0 ? "" : ", ") + describe_process(pids[i]);
  if (pids.size() > kNamed) named += fmt::format(" and {} more", pids.size() - kNamed);
  return fmt::format(
      "waiting for {} the workers left, still running after SIGTERM: {}; SIGKILL in {:.0f} s "
      "(--shutdown-timeout)",
      count_of(static_cast<long long>(pids.size()), "process", "processes"), named,
      std::max(0.0, seconds_to_kill));
}

}  // namespace trainrun::launch
