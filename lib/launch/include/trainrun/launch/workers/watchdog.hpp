#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace trainrun::launch {

// How an environment entry that marks this job's processes starts (see mark_job_directory): a
// process started with an environment of its own (the --preload template) is given the entry too.
inline constexpr std::string_view kJobMarkerEntry = "TORCHELASTIC_ERROR_FILE=";

// A tiny process forked at start that outlives a SIGKILLed launcher by a moment: it holds the
// read end of a pipe from the launcher and, when that pipe closes without a goodbye, SIGKILLs
// every worker process group it was told about. PDEATHSIG alone reaches only direct children.
// Descendants that left their worker's process group (setsid, daemons) are found by an entry of
// their inherited environment that only this job's processes carry (each worker's
// TORCHELASTIC_ERROR_FILE lies in the job's own log directory), and killed too; where the job
// has a cgroup of its own, everything in it is killed and the cgroup removed. A log tree that
// holds no file is removed, as the launcher removes it at its end.
class Watchdog {
 public:
  // Forks the watchdog. Call before starting threads or event loops, and before becoming a
  // child subreaper. Returns false (and the launcher carries on without one) if it cannot start.
  bool start();
  void add_group(pid_t pgid);
  void remove_group(pid_t pgid);
  // The job's log run directory: every worker's TORCHELASTIC_ERROR_FILE lies under it, so the
  // variable marks this job's processes and everything they start.
  void mark_job_directory(const std::string& run_dir);
  // The job's cgroup (see cgroup.hpp): killed and removed first.
  void set_cgroup(const std::string& path);
  // The job's log tree: removed last, if it holds nothing but directories.
  void set_log_tree(const std::string& path);
  // Tells the watchdog the launcher is ending normally: it exits without killing anything.
  void dismiss();

 private:
  void send(int value);
  void send_string(int tag, const std::string& text);
  int fd_ = -1;
};

}  // namespace trainrun::launch
