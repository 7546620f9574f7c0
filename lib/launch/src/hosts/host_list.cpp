#include "trainrun/launch/hosts/host_list.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

namespace {

[[noreturn]] void fail(const std::string& message) { throw UsageError(message); }

// What ssh takes as a destination, and never an option of its own (a leading '-').
bool valid_host_name(const std::string& name) {
  if (name.empty() || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == '@';
  });
}

std::optional<int> parse_slots(const std::string& text) {
  const auto n = parse_integer(text);
  if (!n || *n < 0 || *n > 1 << 20) return std::nullopt;
  return static_cast<int>(*n);
}

// Where `what` says where the entry was ("--hosts=a,a", "--hostfile=F: line 3").
void check_entry(const HostEntry& host, const std::string& where,
                 std::map<std::string, int>& seen) {
  if (host.slots && *host.slots == 0)
    fail(fmt::format("{}: {} has 0 slots; a host runs at least 1 worker (leave it out instead)",
                     where, host.name));
  auto [it, inserted] = seen.emplace(host.name, host.line);
  if (!inserted)
    fail(host.line ? fmt::format("{}: {} is listed twice (first on line {}); list each host once",
                                 where, host.name, it->second)
                   : fmt::format("{}: {} is listed twice; list each host once", where, host.name));
}

// "node1:4" or "node1".
std::optional<HostEntry> parse_host_colon(const std::string& entry) {
  HostEntry host;
  const size_t colon = entry.rfind(':');
  host.name = entry.substr(0, colon);
  if (colon != std::string::npos) {
    host.slots = parse_slots(entry.substr(colon + 1));
    if (!host.slots) return std::nullopt;
  }
  if (!valid_host_name(host.name)) return std::nullopt;
  return host;
}

std::vector<int> parse_indices(const std::string& text, const std::string& entry,
                               const std::string& named) {
  std::vector<int> out;
  for (const std::string& part : split(text, ',')) {
    const auto n = parse_integer(trim(part));
    if (!n || *n < 0 || *n > 1 << 20)
      fail(fmt::format("{}: bad slot index '{}' in '{}'; use HOST or HOST:I,J,...", named,
                       trim(part), entry));
    out.push_back(static_cast<int>(*n));
  }
  return out;
}

}  // namespace

std::vector<HostEntry> parse_host_option(const std::string& text, const std::string& named) {
  std::vector<HostEntry> hosts;
  std::map<std::string, int> seen;
  for (const std::string& raw : split(text, ',')) {
    const std::string entry = trim(raw);
    if (entry.empty()) continue;
    auto host = parse_host_colon(entry);
    if (!host)
      fail(fmt::format("{}: bad host '{}'; use HOST or HOST:SLOTS, comma-separated", named, entry));
    check_entry(*host, named, seen);
    hosts.push_back(std::move(*host));
  }
  if (hosts.empty())
    fail(fmt::format("{}: names no host; give HOST:SLOTS,... (e.g. node0:4,node1:4)", named));
  return hosts;
}

std::vector<HostEntry> parse_host_file(const std::string& text, const std::string& path) {
  std::vector<HostEntry> hosts;
  std::map<std::string, int> seen;
  int number = 0;
  for (std::string raw : split(text, '\n')) {
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();  // written on Windows
    const std::string line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    const std::string where = fmt::format("--hostfile={}: line {}", path, number);
    std::vector<std::string> words;
    for (const std::string& w : split(line, ' '))
      for (const std::string& v : split(w, '\t'))
        if (!v.empty()) words.push_back(v);
    std::optional<HostEntry> host;
    if (words.size() == 1) {
      host = parse_host_colon(words[0]);
    } else if (valid_host_name(words[0])) {
      host = HostEntry{words[0], std::nullopt, 0};
      for (size_t i = 1; i < words.size() && host; ++i) {
        const std::string& w = words[i];
        if (w.rfind("slots=", 0) == 0 && !host->slots) {
          host->slots = parse_slots(w.substr(6));
          if (!host->slots) host.reset();
        } else if (w.rfind("max_slots=", 0) != 0) {
          host.reset();
        }
      }
    }
    if (!host)
      fail(fmt::format("{}: cannot read '{}'; use HOST slots=N, HOST:N or HOST", where,
                       utf8_prefix(line, 80)));
    host->line = number;
    check_entry(*host, where, seen);
    hosts.push_back(std::move(*host));
  }
  if (hosts.empty())
    fail(fmt::format("--hostfile={}: names no host; put one HOST slots=N per line", path));
  return hosts;
}

std::vector<PlannedHost> filter_hosts(const std::vector<HostEntry>& hosts,
                                      const std::string& include, const std::string& exclude) {
  if (!trim(include).empty() && !trim(exclude).empty())
    fail("--include and --exclude cannot be used together: give one of them");
  const bool including = !trim(include).empty();
  const std::string& filter = including ? include : exclude;
  const std::string named = including ? "--include=" + include : "--exclude=" + exclude;
  // Host -> the slot indices named (empty: the whole host).
  std::map<std::string, std::set<int>> named_slots;
  for (const std::string& raw : split(filter, '@')) {
    const std::string entry = trim(raw);
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    const std::string name = entry.substr(0, colon);
    auto host = std::find_if(hosts.begin(), hosts.end(),
                             [&](const HostEntry& h) { return h.name == name; });
    if (host == hosts.end()) fail(fmt::format("{}: {} is not in the host list", named, name));
    auto& slots = named_slots[name];
    if (colon == std::string::npos) continue;
    if (!host->slots)
      fail(
          fmt::format("{}: {} has no slot count to pick from; list it as {}:N", named, name, name));
    for (int index : parse_indices(entry.substr(colon + 1), entry, named)) {
      if (index >= *host->slots)
        fail(fmt::format("{}: {} has slots 0..{}, not {}", named, name, *host->slots - 1, index));
      slots.insert(index);
    }
  }
  std::vector<PlannedHost> out;
  for (const HostEntry& host : hosts) {
    auto it = named_slots.find(host.name);
    const bool listed = it != named_slots.end();
    if (filter.empty() || (!including && !listed)) {
      out.push_back({host.name, host.slots, {}});
      continue;
    }
    if (including && !listed) continue;
    if (it->second.empty()) {
      if (including) out.push_back({host.name, host.slots, {}});
      continue;
    }
    std::vector<int> kept;
    for (int i = 0; i < *host.slots; ++i)
      if (it->second.count(i) == static_cast<size_t>(including)) kept.push_back(i);
    if (kept.empty()) continue;
    out.push_back({host.name, static_cast<int>(kept.size()), kept});
  }
  if (out.empty()) fail(fmt::format("{}: leaves no host to run on", named));
  return out;
}

}  // namespace trainrun::launch
