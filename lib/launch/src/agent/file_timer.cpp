#include "file_timer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "trainrun/base/system.hpp"

namespace trainrun::launch {

std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* problem) {
  auto fail = [&](std::string why) -> std::optional<TimerRequest> {
    if (problem) *problem = std::move(why);
    return std::nullopt;
  };
  if (line.size() > kMaxTimerRequest)
    return fail(fmt::format("longer than {} bytes", kMaxTimerRequest));
  const auto doc = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return fail("not a JSON object");
  const auto pid = doc.find("pid");
  const auto scope = doc.find("scope_id");
  const auto expiration = doc.find("expiration_time");
  const auto signal = doc.find("signal");
  if (pid == doc.end() || !pid->is_number_integer() || pid->get<long long>() <= 0 ||
      pid->get<long long>() > std::numeric_limits<pid_t>::max())
    return fail("no positive integer \"pid\"");
  if (scope == doc.end() || !scope->is_string()) return fail("no string \"scope_id\"");
  if (expiration == doc.end() || !expiration->is_number())
    return fail("no number \"expiration_time\"");
  if (signal == doc.end() || !signal->is_number_integer() || signal->get<long long>() > 64 ||
      signal->get<long long>() < -64)
    return fail("no signal number \"signal\"");
  TimerRequest r;
  r.pid = static_cast<pid_t>(pid->get<long long>());
  r.scope_id = scope->get<std::string>();
  r.expiration_time = expiration->get<double>();
  r.signal = static_cast<int>(signal->get<long long>());
  return r;
}

std::optional<std::string> file_timer_path(const std::map<std::string, std::string>& env) {
  const auto enabled = env.find(kEnableFileTimerVariable);
  if (enabled == env.end() || enabled->second != "1") return std::nullopt;
  const auto given = env.find(kTimerFileVariable);
  if (given != env.end()) return given->second;
  const auto tmp = env.find("TMPDIR");
  const std::string dir = tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
  return dir + "/watchdog_timer_" + random_run_id();
}

void FileTimers::apply(const TimerRequest& request) {
  const auto key = std::make_pair(request.pid, request.scope_id);
  if (request.expiration_time < 0)
    timers_.erase(key);
  else
    timers_[key] = request;
}

std::vector<FileTimers::Expired> FileTimers::expire(double now) {
  std::map<pid_t, Expired> by_pid;
  for (const auto& [key, timer] : timers_) {
    if (timer.expiration_time > now) continue;
    auto& e = by_pid[key.first];
    e.pid = key.first;
    e.scopes.push_back(timer);
  }
  std::vector<Expired> out;
  for (auto& [pid, e] : by_pid) {
    std::stable_sort(e.scopes.begin(), e.scopes.end(), [](const auto& a, const auto& b) {
      return a.expiration_time < b.expiration_time;
    });
    for (const auto& s : e.scopes)
      if (s.signal > 0) {
        e.reaping = s;
        break;
      }
    for (auto it = timers_.begin(); it != timers_.end();)
      it = it->first.first == pid ? timers_.erase(it) : std::next(it);
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<double> FileTimers::next_expiration() const {
  std::optional<double> next;
  for (const auto& [key, timer] : timers_)
    if (!next || timer.expiration_time < *next) next = timer.expiration_time;
  return next;
}

}  // namespace trainrun::launch
