#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace trainrun::launch {

// One host's ssh, as the launcher of a --hosts job starts it: the launcher's ends of its
// standard streams (close-on-exec, non-blocking; stdin's once the handover is written).
struct SshProcess {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
};

// Starts `argv` (ssh and its arguments) in a process group of its own, so that the terminal's
// Ctrl-C reaches the launcher alone, which then stops the agents in order rather than cutting
// their connections; with default signal dispositions and nothing blocked; and writes `handover`
// (a few hundred bytes, which the pipe takes whole) to its standard input. A program that cannot
// run exits 127, saying why on its stderr. Throws SetupError when no pipe or process can be made.
SshProcess start_ssh(const std::vector<std::string>& argv, const std::string& handover);

}  // namespace trainrun::launch
