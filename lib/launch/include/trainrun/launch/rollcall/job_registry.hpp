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

// The user's login name, or the number where there is none.
std::string user_name(uid_t uid);

// Creates `dir` with mode 0700 if it is missing. Throws SetupError when it is not a directory
// of `uid`'s that only `uid` can enter (a directory someone else made in /tmp first).
void make_private_dir(const std::string& dir, uid_t uid);

// Every directory where `uid`'s agents may be registered: runtime_dir() where it is private, and
// the fresh directories `<runtime_dir>.XXXXXX` agents made because it was not (RegistryDir), those
// that are private too. `$TRAINRUN_RUNTIME_DIR` alone when set. `skipped`, when given, gets the
// runtime_dir() that exists but is not private (empty otherwise).
std::vector<std::string> registry_dirs(uid_t uid, const std::map<std::string, std::string>& env,
                                       std::string* skipped = nullptr);

// The directory one agent registers in, held for its life: runtime_dir() when it is (or can be
// made) private; when another user made it first, a fresh private directory beside it, removed
// by the destructor, so that a squatter can turn neither `--stacks` nor `--hang-timeout` off.
// Throws SetupError where `$TRAINRUN_RUNTIME_DIR` names a directory that is not private: the
// user chose it, so nothing else is tried.
class RegistryDir {
 public:
  RegistryDir(uid_t uid, const std::map<std::string, std::string>& env);
  ~RegistryDir();
  RegistryDir(const RegistryDir&) = delete;
  RegistryDir& operator=(const RegistryDir&) = delete;

  const std::string& path() const { return path_; }
  // Why the fresh directory was made (a line for the user); empty when it was not.
  const std::string& note() const { return note_; }

 private:
  std::string path_;
  std::string note_;
  bool fresh_ = false;
};

// What one running agent says of itself.
struct JobEntry {
  pid_t pid = 0;
  std::string run_id;
  int node_rank = -1;  // -1 until the rendezvous has assigned one
  std::string host;
  std::string log_dir;  // the run's directory in the log tree
  std::string socket;
  // What a user tells jobs apart by: the entrypoint and its arguments, the directory it was
  // started in, and when (Unix time).
  std::string command;
  std::string cwd;
  double started = 0;
  // The entrypoint, and whether the job has no rendezvous (one node, its run id "none" or made
  // up: a name that tells the user nothing).
  std::string entrypoint;
  bool lone = false;
};

// How reports name the job: "run ID", or a lone job by its entrypoint and its agent,
// "train.py (trainrun pid 4242)". Pure.
std::string job_title(const JobEntry& entry);

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
