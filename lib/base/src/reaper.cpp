#include "trainrun/base/reaper.hpp"

#include <dirent.h>
#include <sys/wait.h>

#include <cerrno>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/base/system.hpp"

namespace trainrun::reaper {

namespace {

struct Registry {
  std::mutex mutex;
  // Each child started or adopted here: its handler, or none while its starter waits for it.
  std::map<pid_t, Handler> children;
  Handler orphans;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Every child of this process (the children of each of its threads: the kernel hands orphans to
// a subreaper's first living thread), zombies included.
std::vector<pid_t> own_children() {
  std::vector<pid_t> out;
  DIR* tasks = ::opendir("/proc/self/task");
  if (!tasks) return out;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::istringstream in(
        read_small_file(std::string("/proc/self/task/") + entry->d_name + "/children"));
    for (pid_t pid; in >> pid;) out.push_back(pid);
  }
  ::closedir(tasks);
  return out;
}

// Every event `pid` has to give, reaping it when it ended.
void take_events(pid_t pid, std::vector<std::pair<pid_t, WaitEvent>>& events, bool& ended) {
  ended = false;
  while (true) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      ended = true;  // not ours any more: nothing will come
      return;
    }
    if (got == 0) return;
    const WaitEvent event = WaitEvent::from_wait(status);
    events.emplace_back(pid, event);
    if (event.kind == WaitEvent::Kind::ended) {
      ended = true;
      return;
    }
  }
}

}  // namespace

std::unique_lock<std::mutex> fork_lock() { return std::unique_lock<std::mutex>(registry().mutex); }

void started(const std::unique_lock<std::mutex>&, pid_t pid) {
  if (pid > 0) registry().children[pid] = nullptr;
}

void forked(std::unique_lock<std::mutex>& lock) {
  lock.release();
  new (&registry().mutex) std::mutex();
  registry().children.clear();
  registry().orphans = nullptr;
}

void adopt(pid_t pid, Handler handler) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().children[pid] = std::move(handler);
}

void set_orphans(Handler handler) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().orphans = std::move(handler);
}

void collect() {
  std::vector<std::pair<Handler, std::vector<std::pair<pid_t, WaitEvent>>>> given;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto it = r.children.begin(); it != r.children.end();) {
      if (!it->second) {
        ++it;
        continue;
      }
      std::vector<std::pair<pid_t, WaitEvent>> events;
      bool ended = false;
      take_events(it->first, events, ended);
      if (!events.empty()) given.emplace_back(it->second, std::move(events));
      it = ended ? r.children.erase(it) : std::next(it);
    }
    for (const pid_t pid : own_children()) {
      if (r.children.count(pid)) continue;
      std::vector<std::pair<pid_t, WaitEvent>> events;
      bool ended = false;
      take_events(pid, events, ended);
      if (!events.empty() && r.orphans) given.emplace_back(r.orphans, std::move(events));
    }
  }
  for (const auto& [handler, events] : given)
    for (const auto& [pid, event] : events) handler(pid, event);
}

Reaped try_reap(pid_t pid) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  while (true) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return {Reaped::State::running, {}};
    registry().children.erase(pid);
    if (got < 0) return {Reaped::State::gone, {}};
    return {Reaped::State::ended, ExitStatus::from_wait(status)};
  }
}

bool has_ended(pid_t pid) {
  while (true) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0)
      return info.si_pid == pid;
    if (errno != EINTR) return true;  // gone: it will not run again
  }
}

bool has_children() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const pid_t pid : own_children()) {
    const auto it = r.children.find(pid);
    if (it == r.children.end() || it->second) return true;
  }
  return false;
}

}  // namespace trainrun::reaper

namespace trainrun {

std::optional<ExitStatus> wait_for_exit(pid_t pid) {
  // Its starter's from now on, whoever had adopted it: collect() leaves it alone.
  {
    std::lock_guard<std::mutex> lock(reaper::registry().mutex);
    const auto it = reaper::registry().children.find(pid);
    if (it != reaper::registry().children.end()) it->second = nullptr;
  }
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, 0);
    if (got < 0 && errno == EINTR) continue;
    std::lock_guard<std::mutex> lock(reaper::registry().mutex);
    reaper::registry().children.erase(pid);
    if (got == pid) return ExitStatus::from_wait(status);
    return std::nullopt;
  }
}

}  // namespace trainrun
