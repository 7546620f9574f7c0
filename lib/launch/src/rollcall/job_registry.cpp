#include "trainrun/launch/rollcall/job_registry.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

namespace {

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

std::string list(const std::vector<JobEntry>& entries) {
  std::string out;
  for (const auto& e : entries)
    out += fmt::format("{}run {} (pid {})", out.empty() ? "" : ", ", e.run_id, e.pid);
  return out;
}

}  // namespace

std::string runtime_dir(uid_t uid, const std::map<std::string, std::string>& env) {
  if (auto it = env.find("TRAINRUN_RUNTIME_DIR"); it != env.end() && !it->second.empty())
    return it->second;
  return fmt::format("/tmp/trainrun-{}", uid);
}

void make_private_dir(const std::string& dir, uid_t uid) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw SetupError(fmt::format("cannot create {}: {}", dir, std::strerror(errno)));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw SetupError(fmt::format("cannot read {}: {}", dir, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077) != 0)
    throw SetupError(fmt::format(
        "{} is not a private directory of user {} (a directory of mode 0700 it owns): remove it "
        "or set TRAINRUN_RUNTIME_DIR",
        dir, uid));
}

std::string entry_json(const JobEntry& e) {
  // The run id, the host and the paths are bytes from the command line and the system: what is
  // not UTF-8 is written as U+FFFD rather than refused.
  return nlohmann::json{{"pid", e.pid},   {"run_id", e.run_id},   {"node_rank", e.node_rank},
                        {"host", e.host}, {"log_dir", e.log_dir}, {"socket", e.socket}}
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::optional<JobEntry> parse_entry(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    JobEntry e;
    e.pid = j.at("pid").get<pid_t>();
    e.run_id = j.at("run_id").get<std::string>();
    e.node_rank = j.at("node_rank").get<int>();
    e.host = j.at("host").get<std::string>();
    e.log_dir = j.at("log_dir").get<std::string>();
    e.socket = j.at("socket").get<std::string>();
    return e;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::vector<JobEntry> live_entries(const std::string& dir) {
  std::vector<JobEntry> entries;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return entries;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    const auto pid = parse_integer(name.substr(0, name.size() - 5));
    if (!pid || *pid <= 0) continue;
    if (!alive(static_cast<pid_t>(*pid))) {
      // An agent killed with SIGKILL could not remove its files.
      ::unlink((dir + "/" + name).c_str());
      ::unlink(fmt::format("{}/{}.sock", dir, *pid).c_str());
      continue;
    }
    if (auto entry = parse_entry(read_small_file(dir + "/" + name)); entry && entry->pid == *pid) {
      // The file's copy of the path holds U+FFFD where the directory's name is not UTF-8.
      entry->socket = fmt::format("{}/{}.sock", dir, *pid);
      entries.push_back(*entry);
    }
  }
  ::closedir(d);
  std::sort(entries.begin(), entries.end(),
            [](const JobEntry& a, const JobEntry& b) { return a.pid < b.pid; });
  return entries;
}

JobRegistration::JobRegistration(const std::string& dir, JobEntry entry)
    : file_(fmt::format("{}/{}.json", dir, entry.pid)), entry_(std::move(entry)) {
  make_private_dir(dir, ::geteuid());
  entry_.socket = fmt::format("{}/{}.sock", dir, entry_.pid);
  if (entry_.socket.size() >= sizeof(sockaddr_un{}.sun_path))
    throw SetupError(
        fmt::format("{}: the path is too long for a Unix socket ({} bytes at most): "
                    "set TRAINRUN_RUNTIME_DIR to a shorter directory",
                    entry_.socket, sizeof(sockaddr_un{}.sun_path) - 1));
  ::unlink(entry_.socket.c_str());  // left by an earlier process of the same pid
  write_file_atomically(file_, entry_json(entry_));
}

JobRegistration::~JobRegistration() {
  ::unlink(file_.c_str());
  ::unlink(entry_.socket.c_str());
}

void JobRegistration::update(int node_rank) {
  if (entry_.node_rank == node_rank) return;
  entry_.node_rank = node_rank;
  try {
    write_file_atomically(file_, entry_json(entry_));
  } catch (const SetupError&) {
    // The entry keeps its old node rank: the roll call still finds the job by pid and run id.
  }
}

JobEntry select_job(const std::vector<JobEntry>& entries, const std::string& selector,
                    const std::vector<pid_t>& ancestors, const std::string& dir) {
  auto fail = [](const std::string& line) { throw LaunchError(line, 1); };
  if (selector.empty()) {
    std::vector<JobEntry>
        jobs;  // one agent per run: two agents of a run on one machine are one job
    for (const auto& e : entries)
      if (std::none_of(jobs.begin(), jobs.end(),
                       [&](const JobEntry& j) { return j.run_id == e.run_id; }))
        jobs.push_back(e);
    if (jobs.empty())
      fail(
          fmt::format("no trainrun job of this user is running on this machine (none is "
                      "registered in {})",
                      dir));
    if (jobs.size() > 1)
      fail(
          fmt::format("{} trainrun jobs are running on this machine: name one with "
                      "--stacks=RUN_ID or --stacks=PID ({})",
                      jobs.size(), list(jobs)));
  }
  std::vector<JobEntry> of_run;
  for (const auto& e : entries)
    if (selector.empty() || e.run_id == selector) of_run.push_back(e);
  if (!of_run.empty())
    return *std::min_element(
        of_run.begin(), of_run.end(), [](const JobEntry& a, const JobEntry& b) {
          return static_cast<unsigned>(a.node_rank) < static_cast<unsigned>(b.node_rank);
        });
  if (ancestors.empty())
    fail(fmt::format("no trainrun job with run id {} is running on this machine ({})", selector,
                     entries.empty() ? "none is" : "running: " + list(entries)));
  for (pid_t pid : ancestors)
    for (const auto& e : entries)
      if (e.pid == pid) return e;
  fail(fmt::format(
      "process {} is not a trainrun agent nor one of its workers: give trainrun's "
      "PID or the job's run id ({})",
      ancestors.front(), entries.empty() ? "no job is running" : "running: " + list(entries)));
  return {};
}

}  // namespace trainrun::launch
