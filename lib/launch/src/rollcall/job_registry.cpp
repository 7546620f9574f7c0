#include "trainrun/launch/rollcall/job_registry.hpp"

#include <dirent.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

namespace {

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Whether the user named the runtime directory: then it alone is used, and nothing else tried.
bool runtime_dir_chosen(const std::map<std::string, std::string>& env) {
  auto it = env.find("TRAINRUN_RUNTIME_DIR");
  return it != env.end() && !it->second.empty();
}

// Each job as its user knows it: `run ID (pid N: train.py --lr 0.1 in /home/me/proj, started
// 2026-12-03 14:02:11)`, the command cut to a readable length.
std::string list(const std::vector<JobEntry>& entries) {
  constexpr std::size_t kShown = 60;
  std::string out;
  for (const auto& e : entries) {
    std::string what =
        e.command.size() > kShown ? e.command.substr(0, kShown - 3) + "..." : e.command;
    if (!e.cwd.empty()) what += (what.empty() ? "in " : " in ") + e.cwd;
    if (e.started > 0)
      what += fmt::format("{}started {:%Y-%m-%d %H:%M:%S}", what.empty() ? "" : ", ",
                          fmt::localtime(static_cast<std::time_t>(e.started)));
    out += fmt::format("{}run {} (pid {}{}{})", out.empty() ? "" : ", ", e.run_id, e.pid,
                       what.empty() ? "" : ": ", what);
  }
  return out;
}

}  // namespace

std::string runtime_dir(uid_t uid, const std::map<std::string, std::string>& env) {
  if (runtime_dir_chosen(env)) return env.at("TRAINRUN_RUNTIME_DIR");
  return fmt::format("/tmp/trainrun-{}", uid);
}

std::string user_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

namespace {

// Why `st` (of `dir`) is not a private directory of `uid`; empty when it is.
std::string not_private(const std::string& dir, const struct stat& st, uid_t uid) {
  if (S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & 077) == 0) return "";
  return fmt::format(
      "{} is not a private directory of user {} (a directory of mode 0700 it owns; this one: {}, "
      "owner {}, mode {:04o})",
      dir, user_name(uid), S_ISDIR(st.st_mode) ? "a directory" : "not a directory",
      user_name(st.st_uid), st.st_mode & 07777);
}

bool is_private_dir(const std::string& dir, uid_t uid) {
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0 && not_private(dir, st, uid).empty();
}

// Creates `dir` with mode 0700 if it is missing; why it is not a private directory of `uid`
// (it cannot be made or read, or someone else's), empty when it is.
std::string private_dir_problem(const std::string& dir, uid_t uid) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return fmt::format("cannot create {}: {}", dir, std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return fmt::format("cannot read {}: {}", dir, std::strerror(errno));
  return not_private(dir, st, uid);
}

}  // namespace

void make_private_dir(const std::string& dir, uid_t uid) {
  if (const std::string why = private_dir_problem(dir, uid); !why.empty())
    throw SetupError(why + ": remove it or set TRAINRUN_RUNTIME_DIR");
}

std::vector<std::string> registry_dirs(uid_t uid, const std::map<std::string, std::string>& env,
                                       std::string* skipped) {
  const std::string primary = runtime_dir(uid, env);
  if (skipped) skipped->clear();
  std::vector<std::string> dirs;
  struct stat st {};
  if (::lstat(primary.c_str(), &st) == 0) {
    if (not_private(primary, st, uid).empty())
      dirs.push_back(primary);
    else if (skipped)
      *skipped = primary;
  }
  if (runtime_dir_chosen(env)) return dirs;
  const auto slash = primary.rfind('/');
  const std::string parent = primary.substr(0, slash);
  const std::string prefix = primary.substr(slash + 1) + ".";
  DIR* d = ::opendir(parent.empty() ? "/" : parent.c_str());
  if (!d) return dirs;
  std::vector<std::string> fresh;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        is_private_dir(parent + "/" + name, uid))
      fresh.push_back(parent + "/" + name);
  }
  ::closedir(d);
  std::sort(fresh.begin(), fresh.end());
  dirs.insert(dirs.end(), fresh.begin(), fresh.end());
  return dirs;
}

RegistryDir::RegistryDir(uid_t uid, const std::map<std::string, std::string>& env)
    : path_(runtime_dir(uid, env)) {
  const std::string why = private_dir_problem(path_, uid);
  if (why.empty()) return;
  if (runtime_dir_chosen(env)) throw SetupError(why + ": remove it or set TRAINRUN_RUNTIME_DIR");
  std::string fresh = path_ + ".XXXXXX";
  if (!::mkdtemp(fresh.data()))
    throw SetupError(
        fmt::format("{}; nor can a directory {} be made: {}", why, fresh, std::strerror(errno)));
  note_ = fmt::format(
      "{}; this job registers in {} instead, where trainrun --stacks finds it "
      "(remove {} when you can)",
      why, fresh, path_);
  path_ = fresh;
  fresh_ = true;
}

RegistryDir::~RegistryDir() {
  if (fresh_) ::rmdir(path_.c_str());
}

std::string job_title(const JobEntry& e) {
  if (!e.lone) return "run " + e.run_id;
  const auto slash = e.entrypoint.rfind('/');
  const std::string name =
      slash == std::string::npos ? e.entrypoint : e.entrypoint.substr(slash + 1);
  return fmt::format("{} (trainrun pid {})", name.empty() ? "the job" : name, e.pid);
}

std::string entry_json(const JobEntry& e) {
  // The run id, the host, the command and the paths are bytes from the command line and the
  // system: what is not UTF-8 is written as U+FFFD rather than refused.
  return nlohmann::json{{"pid", e.pid},
                        {"run_id", e.run_id},
                        {"node_rank", e.node_rank},
                        {"host", e.host},
                        {"log_dir", e.log_dir},
                        {"socket", e.socket},
                        {"command", e.command},
                        {"cwd", e.cwd},
                        {"started", e.started},
                        {"entrypoint", e.entrypoint},
                        {"lone", e.lone}}
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
    e.command = j.value("command", "");
    e.cwd = j.value("cwd", "");
    e.started = j.value("started", 0.0);
    e.entrypoint = j.value("entrypoint", "");
    e.lone = j.value("lone", false);
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
  write_file_atomically(file_, entry_json(entry_), /*durable=*/false);
}

JobRegistration::~JobRegistration() {
  ::unlink(file_.c_str());
  ::unlink(entry_.socket.c_str());
}

void JobRegistration::update(int node_rank) {
  if (entry_.node_rank == node_rank) return;
  entry_.node_rank = node_rank;
  try {
    write_file_atomically(file_, entry_json(entry_), /*durable=*/false);
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
