#include "trainrun/base/processes.hpp"

#include <dirent.h>

#include <cstdio>
#include <string>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"

namespace trainrun {

std::vector<pid_t> process_ids() {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (dirent* e = readdir(proc)) {
    if (const std::optional<long long> pid = parse_integer(e->d_name))
      out.push_back(static_cast<pid_t>(*pid));
  }
  closedir(proc);
  return out;
}

std::optional<ProcessStat> process_stat(pid_t pid) {
  const std::optional<std::string> line = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!line) return std::nullopt;
  // The fields after the command name, which sits in parentheses and may hold anything.
  const auto close_paren = line->rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  ProcessStat s;
  int parent = 0;
  int group = 0;
  if (std::sscanf(line->c_str() + close_paren + 1, " %c %d %d", &s.state, &parent, &group) != 3)
    return std::nullopt;
  s.parent = static_cast<pid_t>(parent);
  s.group = static_cast<pid_t>(group);
  return s;
}

namespace {

template <typename Keep>
std::vector<pid_t> live_processes(Keep keep) {
  std::vector<pid_t> out;
  for (pid_t pid : process_ids()) {
    const std::optional<ProcessStat> s = process_stat(pid);
    if (s && s->state != 'Z' && keep(*s)) out.push_back(pid);
  }
  return out;
}

}  // namespace

std::vector<pid_t> group_members(pid_t pgid) {
  return live_processes([pgid](const ProcessStat& s) { return s.group == pgid; });
}

std::vector<pid_t> live_children(pid_t parent) {
  return live_processes([parent](const ProcessStat& s) { return s.parent == parent; });
}

}  // namespace trainrun
