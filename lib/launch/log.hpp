#pragma once

#include <string>
#include <string_view>

namespace trainrun::launch {

// One of the launcher's own lines: "trainrun: <line>\n", for stderr. The prefix tells them from
// the workers' output that shares the console. Control characters in `line` (a newline
// included) are escaped (trainrun::escape_control): it may quote text from other nodes.
std::string launcher_line(std::string_view line);

// Writes launcher_line(line) to stderr at once (blocking): for what is said outside the agent's
// event loop, before it starts or after it has ended.
void say(std::string_view line);

}  // namespace trainrun::launch
