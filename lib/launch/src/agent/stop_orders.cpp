#include "stop_orders.hpp"

#include <signal.h>

namespace trainrun::launch {

void StopOrders::new_attempt() {
  signal_ = 0;
  restart_ = false;
  halted_ = false;
}

bool StopOrders::counts_as_failure(const ExitStatus& status, bool running, bool failed_here) const {
  if (restart_ || stop_ || (halted_ && !failed_here)) return false;
  if (running) return true;
  return status.signal != SIGTERM && status.signal != SIGKILL;
}

std::optional<int> StopOrders::after_attempt_in_job(AgentActions& out,
                                                    const AttemptFailures& failures, bool ran) {
  if (stop_) return failures.stopped(out, *stop_, ran);
  if (restart_) {
    restart_ = false;
    out.emplace_back(action::Join{});
    return std::nullopt;
  }
  if (halted_) {
    out.emplace_back(failures.ended());
    return std::nullopt;
  }
  // Our own workers all succeeded: wait at the exit barrier; our failures were reported and
  // the decision is on its way.
  if (failures.empty()) out.emplace_back(action::ReportDone{});
  return std::nullopt;
}

}  // namespace trainrun::launch
