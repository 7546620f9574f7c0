#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainrun::launch {

// Where a user's running agents register themselves, one pair of files per agent:
// `<pid>.json` (JobEntry) and `<pid>.sock` (the roll call's Unix socket). The directory is
// `$TRAINRUN_RUNTIME_DIR` when set, else `/tmp/trainrun-<uid>`: the same for every session of a
// user (XDG_RUNTIME_DIR is unset under su, cron and srun, and removed at logout), and computable
// for another user's process by root.
std::string runtime_dir(uid_t uid, const std::map<std::string, std::string>& env);

// Creates `dir` with mode 0700 if it is missing. Throws SetupError when it is not a directory
// of `uid`'s that only `uid` can enter (a directory someone else made in /tmp first).
void make_private_dir(const std::string& dir, uid_t uid);

// What one running agent says of itself.
struct JobEntry {
  pid_t pid = 0;
  std::string run_id;
  int node_rank = -1;  // -1 until the rendezvous has assigned one
  std::string host;
  std::string log_dir;  // the run's directory in the log tree
  std::string socket;
};

std::string entry_json(const JobEntry& entry);
// Nothing for a file of another shape (a half-written or foreign file).
std::optional<JobEntry> parse_entry(const std::string& text);

// The entries in `dir` of agents still alive; files of dead pids are removed. Empty when the
// directory cannot be read.
std::vector<JobEntry> live_entries(const std::string& dir);

// The agent's own registration, held for its life: created by the constructor, rewritten by
// update(), removed by the destructor.
class JobRegistration {
 public:
  // Throws SetupError (the directory is not private, the socket path is too long).
  JobRegistration(const std::string& dir, JobEntry entry);
  ~JobRegistration();
  JobRegistration(const JobRegistration&) = delete;
  JobRegistration& operator=(const JobRegistration&) = delete;

  const JobEntry& entry() const { return entry_; }
  void update(int node_rank);

 private:
  std::string file_;
  JobEntry entry_;
};

// Which agent `trainrun --stacks[=SELECTOR]` asks, out of this user's `entries`: the one of run
// id SELECTOR (several agents of one run on this machine: the lowest node rank), the agent of
// PID SELECTOR or of a worker under it (`ancestors`: the pid's parents, nearest first), or the
// only job when SELECTOR is empty. Throws LaunchError (exit 1) with one line saying why not.
// Pure: the caller has checked that a PID SELECTOR is a live process of this user.
JobEntry select_job(const std::vector<JobEntry>& entries, const std::string& selector,
                    const std::vector<pid_t>& ancestors, const std::string& dir);

}  // namespace trainrun::launch
