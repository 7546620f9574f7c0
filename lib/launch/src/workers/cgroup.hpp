#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

namespace trainrun::launch {

// Where a cgroup is: its hierarchy's mount point here, and the path below it ("" or "/a/b").
struct CgroupDirectory {
  std::string mount_point;
  std::string relative;
  std::string path() const { return mount_point + relative; }
};

// The directory of the process whose /proc/PID/cgroup is `proc_cgroup` in the hierarchy of
// `controller`: "" for cgroup v2, else a cgroup v1 controller ("pids"), mounted as
// /proc/self/mountinfo (`mountinfo`) says (whose root may be a part of the hierarchy); nullopt
// when that hierarchy is not mounted here.
std::optional<CgroupDirectory> find_cgroup_directory(const std::string& proc_cgroup,
                                                     const std::string& mountinfo,
                                                     const std::string& controller);

// The smallest pids.max set on this process's cgroup or one above it (cgroup v2, else v1's pids
// controller), and the file that sets it; max 0 when there is none ("max" everywhere).
struct PidsLimit {
  long long max = 0;
  std::string file;
};
PidsLimit own_pids_limit();

// A cgroup v2 of the job's own, where the kernel lets this process make one: every worker moves
// itself in before exec, so whatever they start stays in it, whatever process group, session or
// environment it takes, and stopping the job reaches all of it. Made under this process's own
// cgroup v2 (found from /proc/self/cgroup and /proc/self/mountinfo); where that is not mounted
// or not writable, or TRAINRUN_CGROUP=0 is set, there is none and the launcher relies on
// process groups, the subreaper and the job marker alone.
class JobCgroup {
 public:
  // The job's cgroup, or nullptr where none can be made.
  static std::unique_ptr<JobCgroup> create();
  // Kills what is left in it (bounded) and removes it.
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  const std::string& path() const { return path_; }
  // Its directory, open (close-on-exec): a worker is made in it (SpawnRequest::cgroup_fd).
  int fd() const { return fd_; }
  // Sends `sig` to every process in it; SIGKILL goes through cgroup.kill where the kernel has it,
  // which also reaches processes forking meanwhile.
  void signal(int sig) const;
  // Whether any process is still in it.
  bool populated() const;

 private:
  JobCgroup(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// SIGKILLs everything in the cgroup at `path` and in the cgroups below it, waits (bounded) until
// they are empty and removes them. For the watchdog, which knows the job's cgroup by its path.
void kill_and_remove_cgroup(const std::string& path);

}  // namespace trainrun::launch
