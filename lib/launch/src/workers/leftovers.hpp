#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace trainrun::launch {

// "pid 123 (sleep 1000)": a process by its id and command line (its name when the command line
// cannot be read), control characters escaped, at most 80 bytes of command.
std::string describe_process(pid_t pid);

// The one line said when processes the workers left ignore SIGTERM and delay the end of the
// attempt: each named (the first few), and when SIGKILL follows.
std::string leftovers_line(std::vector<pid_t> pids, double seconds_to_kill);

}  // namespace trainrun::launch
