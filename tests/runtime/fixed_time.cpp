// Preloaded into a program (LD_PRELOAD) to pin its clock to a second: time() returns
// $TRAINRUN_FIXED_TIME (seconds since the epoch) when it is set, else the real time. Two runs
// given the same value start "in the same second" for certain.
#include <stdlib.h>
#include <time.h>

extern "C" time_t time(time_t* out) noexcept {
  time_t now = 0;
  if (const char* fixed = ::getenv("TRAINRUN_FIXED_TIME")) {
    now = static_cast<time_t>(::strtoll(fixed, nullptr, 10));
  } else {
    timespec real{};
    ::clock_gettime(CLOCK_REALTIME, &real);
    now = real.tv_sec;
  }
  if (out) *out = now;
  return now;
}
