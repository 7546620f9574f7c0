#include "trainrun/launch/rollcall/stacks_command.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/processes.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/rollcall/job_registry.hpp"
#include "trainrun/launch/rollcall/roll_call.hpp"

namespace trainrun::launch {

namespace {

// The agent's answer comes once every tool has run (each bounded by its timeout) and, on a
// multi-node job, the other nodes have answered or been given up on.
constexpr auto kReplyTimeout = std::chrono::seconds(120);
constexpr std::size_t kMaxReply = std::size_t{64} << 20;

[[noreturn]] void fail(const std::string& line) { throw LaunchError(line, 1); }

// pid, its parent, its parent's parent... up to init.
std::vector<pid_t> ancestors(pid_t pid) {
  std::vector<pid_t> chain;
  for (pid_t p = pid; p > 1 && chain.size() < 64;) {
    chain.push_back(p);
    const auto stat = process_stat(p);
    if (!stat) break;
    p = stat->parent;
  }
  return chain;
}

std::string ask(const JobEntry& job) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(fmt::format("cannot create a socket: {}", std::strerror(errno)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", job.socket.c_str());
  auto unreachable = [&](const char* what) {
    const int error = errno;
    ::close(fd);
    fail(fmt::format("cannot ask the job of run {} (pid {}) at {}: {} ({})", job.run_id, job.pid,
                     job.socket, std::strerror(error), what));
  };
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    unreachable("connect");
  const std::string request = "stacks\n";
  if (!write_all(fd, request.data(), request.size())) unreachable("write");
  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + kReplyTimeout;
  char buffer[65536];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || (::poll(&p, 1, static_cast<int>(left)) == 0)) {
      ::close(fd);
      fail(fmt::format("the job of run {} (pid {}) did not answer within {} s", job.run_id, job.pid,
                       kReplyTimeout.count()));
    }
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) unreachable("read");
    if (n == 0) break;
    reply.append(buffer, static_cast<std::size_t>(n));
    if (reply.size() > kMaxReply) {
      ::close(fd);
      fail(fmt::format("the job of run {} (pid {}) answered more than {} MiB", job.run_id, job.pid,
                       kMaxReply >> 20));
    }
  }
  ::close(fd);
  if (reply.empty())
    fail(fmt::format("the job of run {} (pid {}) closed the connection without an answer",
                     job.run_id, job.pid));
  return reply;
}

}  // namespace

std::optional<std::string> stacks_selector(const std::vector<std::string>& args) {
  if (args.empty()) return std::nullopt;
  std::string selector;
  std::size_t rest = 1;
  if (args[0] == "--stacks") {
    if (args.size() > 1) selector = args[1], rest = 2;
  } else if (args[0].rfind("--stacks=", 0) == 0) {
    selector = args[0].substr(9);
  } else {
    return std::nullopt;
  }
  if (args.size() > rest)
    throw UsageError(
        fmt::format("--stacks takes one run id or PID, not also {} (trainrun "
                    "--stacks[=RUN_ID|PID])",
                    args[rest]));
  return selector;
}

int run_stacks_command(const std::string& selector, const std::map<std::string, std::string>& env) {
  const auto number = parse_integer(selector);
  bool pid_selector = number && *number > 0 && *number <= 0x7fffffff;
  const pid_t pid = pid_selector ? static_cast<pid_t>(*number) : 0;
  struct stat proc {};
  const bool exists = pid_selector && ::stat(fmt::format("/proc/{}", pid).c_str(), &proc) == 0;
  // Root asking about another user's process reads that user's directories.
  uid_t owner = ::geteuid();
  if (exists && owner == 0 && env.find("TRAINRUN_RUNTIME_DIR") == env.end()) owner = proc.st_uid;
  // A directory of the user's that another user made first is not read: its jobs cannot be
  // trusted. Agents then register in fresh private directories beside it, read here.
  std::string skipped;
  const std::vector<std::string> dirs = registry_dirs(owner, env, &skipped);
  std::vector<JobEntry> entries;
  for (const auto& dir : dirs) {
    auto found = live_entries(dir);
    entries.insert(entries.end(), found.begin(), found.end());
  }
  // A run id made of digits names its run first.
  for (const auto& e : entries)
    if (e.run_id == selector) pid_selector = false;
  std::vector<pid_t> chain;
  if (pid_selector) {
    if (!exists)
      fail(fmt::format("no process {} is running: the job has ended, or the PID is wrong", pid));
    if (proc.st_uid != ::geteuid() && ::geteuid() != 0)
      fail(fmt::format("process {} belongs to user {}: run trainrun --stacks as that user", pid,
                       user_name(proc.st_uid)));
    chain = ancestors(pid);
  }
  std::string where;
  for (const auto& dir : dirs) where += (where.empty() ? "" : ", ") + dir;
  if (!skipped.empty() && where.empty())
    where = fmt::format("{}, which is not a private directory of user {} and was not read", skipped,
                        user_name(owner));
  else if (!skipped.empty())
    where += fmt::format("; {} is not a private directory of user {}, not read", skipped,
                         user_name(owner));
  if (where.empty()) where = runtime_dir(owner, env);
  const JobEntry job = select_job(entries, selector, chain, where);
  const std::string text = ask(job);
  nlohmann::json reply;
  std::string report;
  try {
    reply = nlohmann::json::parse(text);
    if (reply.contains("error"))
      fail(fmt::format("the job of run {} (pid {}) refused: {}", job.run_id, job.pid,
                       reply.at("error").get<std::string>()));
    report = format_roll_call(reply);
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("the job of run {} (pid {}) answered something else than a roll call: {}",
                     job.run_id, job.pid, e.what()));
  }
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace trainrun::launch
