#pragma once

#include <fmt/format.h>

#include <string>

#include "agent/agent_actions.hpp"

namespace trainrun::test {

// Worker `local_rank`'s end as the agent sees it; with `message`, it left an error file written
// at `written` (unix seconds).
inline launch::WorkerExit worker_exit(int local_rank, ExitStatus status,
                                      const std::string& message = "", double written = 0) {
  launch::WorkerExit e;
  e.local_rank = local_rank;
  e.pid = 1000 + local_rank;
  e.status = status;
  e.seen_at = 5000 + local_rank;
  e.error_file = fmt::format("/logs/{}/error.json", local_rank);
  if (!message.empty()) e.contents = launch::ErrorFileContents{message, "Traceback ...", written};
  return e;
}

}  // namespace trainrun::test
