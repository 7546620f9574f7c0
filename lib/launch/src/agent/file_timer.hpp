#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun::launch {

// TorchElastic's file timer (torch.distributed.elastic.timer.FileTimerClient): workers write one
// JSON line per request into a FIFO the launcher serves. The variables are torchrun's.
inline constexpr char kEnableFileTimerVariable[] = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr char kTimerFileVariable[] = "TORCHELASTIC_TIMER_FILE";
// The client refuses requests longer than PIPE_BUF (a FIFO write of that size is atomic).
inline constexpr std::size_t kMaxTimerRequest = 4096;

// One request, as FileTimerRequest.to_json() writes it: {"version": 1, "pid": P, "scope_id": S,
// "expiration_time": unix seconds, "signal": N}. A negative expiration_time releases the scope.
struct TimerRequest {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;
  int signal = 0;  // <= 0: the worker is not signalled when the scope expires
};

// Parses one line (without its newline). Nothing, and `problem` says why, for anything else.
std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* problem);

// The FIFO torchrun would serve, from the launcher's environment: none unless
// TORCHELASTIC_ENABLE_FILE_TIMER is "1"; then TORCHELASTIC_TIMER_FILE when set, else
// `temp_dir`/watchdog_timer_<uuid> with temp_dir $TMPDIR or /tmp.
std::optional<std::string> file_timer_path(const std::map<std::string, std::string>& env);

// The armed scopes of one node's workers, as torchrun's FileTimerServer keeps them: one per
// (pid, scope); a new request for the same pair replaces it. Pure: the time comes in.
class FileTimers {
 public:
  struct Expired {
    pid_t pid = 0;
    std::vector<TimerRequest> scopes;  // every expired scope of this pid, earliest first
    // The first of them, in that order, that asks for a signal; none: the pid is left alone.
    std::optional<TimerRequest> reaping;
  };

  // Arms, re-arms or (negative expiration) releases a scope.
  void apply(const TimerRequest& request);
  // The pids with a scope expired at `now`, each with every timer of that pid dropped (as
  // torchrun's: a reaped worker's other scopes go with it).
  std::vector<Expired> expire(double now);
  // When the next scope expires; none when nothing is armed.
  std::optional<double> next_expiration() const;
  bool empty() const { return timers_.empty(); }

 private:
  std::map<std::pair<pid_t, std::string>, TimerRequest> timers_;
};

}  // namespace trainrun::launch
