#include "trainrun/stacks/groups.hpp"

#include <fmt/format.h>
#include <string.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <stdexcept>

namespace trainrun::stacks {

namespace {

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A frame where the user's code runs: not Python's standard library or an installed package,
// not a system library.
bool user_code(const Frame& f) {
  if (f.kind == FrameKind::python) {
    return !f.file.empty() && f.file[0] != '<' &&
           f.file.find("/site-packages/") == std::string::npos &&
           f.file.find("/dist-packages/") == std::string::npos &&
           f.file.find("/lib/python") == std::string::npos;
  }
  if (f.function.empty() || starts_with(f.function, "0x")) return false;
  for (const char* system : {"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "[vdso"})
    if (starts_with(f.module, system)) return false;
  return !f.module.empty() || !f.file.empty();
}

std::string where_of(const Frame& f) {
  std::string text = f.function.empty() ? "??" : f.function;
  if (f.kind == FrameKind::python || (!text.empty() && text.back() != ')' && !f.file.empty()))
    text += "()";
  if (!f.file.empty())
    return f.line > 0 ? fmt::format("{} ({}:{})", text, base_name(f.file), f.line)
                      : fmt::format("{} ({})", text, base_name(f.file));
  if (!f.module.empty()) return fmt::format("{} [{}]", text, base_name(f.module));
  return text;
}

}  // namespace

std::string where_is(const Stack& stack) {
  const Thread* main = stack.main_thread();
  if (!main) return "no thread";
  for (FrameKind kind : {FrameKind::python, FrameKind::native})
    for (const auto& f : main->frames)
      if (f.kind == kind && user_code(f)) return where_of(f);
  if (!main->frames.empty()) return where_of(main->frames.front());
  return signature(stack).front().function;
}

namespace {

std::string frame_label(const Frame& f) {
  if (!f.function.empty()) return f.function;
  return f.module.empty() ? "??" : fmt::format("?? [{}]", f.module);
}

}  // namespace

std::vector<Frame> signature(const Stack& stack, bool with_lines) {
  const Thread* main = stack.main_thread();
  if (!main) return {Frame{"no thread", "", 0, "", FrameKind::native}};
  const bool python = std::any_of(main->frames.begin(), main->frames.end(),
                                  [](const Frame& f) { return f.kind == FrameKind::python; });
  std::vector<Frame> frames;
  for (const auto& f : main->frames) {
    if (python && f.kind != FrameKind::python) continue;
    Frame s;
    s.kind = f.kind;
    // py-spy names a native frame without a symbol by its address.
    if (!starts_with(f.function, "0x")) s.function = f.function;
    s.file = base_name(f.file);
    s.module = base_name(f.module);
    if (with_lines) s.line = f.line;
    frames.push_back(std::move(s));
  }
  if (frames.empty()) {
    std::string what = main->syscall.empty() ? "no frames" : "syscall " + main->syscall;
    if (!main->wchan.empty()) what += ", wchan " + main->wchan;
    if (main->syscall.empty() && main->wchan.empty() && !main->state.empty())
      what += ", " + main->state;
    frames.push_back(Frame{what, "", 0, "", FrameKind::native});
  }
  return frames;
}

std::vector<Group> group_stacks(const std::vector<RankStack>& stacks) {
  std::map<std::string, Group> by_key;
  for (const auto& rs : stacks) {
    std::vector<Frame> frames = signature(rs.stack);
    const Frame top = signature(rs.stack, true).front();
    std::string key;
    for (const auto& f : frames) {
      key += f.function + '\0' + f.file + '\0' + f.module + '\0' +
             (f.kind == FrameKind::python ? 'p' : 'n') + '\n';
    }
    Group& g = by_key[key];
    if (g.ranks.empty()) g.frames = std::move(frames), g.top = top;
    g.ranks.push_back(rs.rank);
    if (std::find(g.hosts.begin(), g.hosts.end(), rs.host) == g.hosts.end())
      g.hosts.push_back(rs.host);
  }
  std::vector<Group> groups;
  for (auto& entry : by_key) {
    std::sort(entry.second.ranks.begin(), entry.second.ranks.end());
    groups.push_back(std::move(entry.second));
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() < b.ranks.size();
    return a.ranks.front() < b.ranks.front();
  });
  return groups;
}

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string format_groups(const std::vector<Group>& groups, std::size_t max_frames) {
  std::string out;
  for (const auto& g : groups) {
    out += fmt::format("{} {} ({}): ", g.ranks.size() == 1 ? "rank" : "ranks", rank_ranges(g.ranks),
                       g.ranks.size());
    for (std::size_t i = 0; i < g.frames.size() && i < max_frames; ++i)
      out += (i ? " <- " : "") + frame_label(g.frames[i]);
    if (g.frames.size() > max_frames)
      out += fmt::format(" <- ... ({} more)", g.frames.size() - max_frames);
    out += '\n';
  }
  return out;
}

nlohmann::json groups_json(const std::vector<Group>& groups) {
  auto out = nlohmann::json::array();
  for (const auto& g : groups) {
    auto frames = nlohmann::json::array();
    for (const auto& f : g.frames) {
      frames.push_back({{"function", f.function},
                        {"file", f.file},
                        {"module", f.module},
                        {"kind", f.kind == FrameKind::python ? "python" : "native"}});
    }
    out.push_back({{"ranks", g.ranks}, {"hosts", g.hosts}, {"frames", frames}});
  }
  return out;
}

std::vector<Suspect> odd_ranks(const std::vector<Group>& groups,
                               const std::vector<RankStack>& stacks) {
  if (groups.size() < 2) return {};
  const std::size_t smallest = groups.front().ranks.size();
  const auto larger = std::count_if(groups.begin(), groups.end(),
                                    [&](const Group& g) { return g.ranks.size() > smallest; });
  if (larger != 1) return {};
  std::vector<Suspect> suspects;
  for (const auto& g : groups) {
    if (g.ranks.size() != smallest) continue;
    for (int rank : g.ranks) {
      for (const auto& rs : stacks) {
        if (rs.rank != rank) continue;
        suspects.push_back({rank, rs.host, where_is(rs.stack)});
        break;
      }
    }
  }
  std::sort(suspects.begin(), suspects.end(),
            [](const Suspect& a, const Suspect& b) { return a.rank < b.rank; });
  return suspects;
}

std::string describe_suspects(const std::vector<Suspect>& suspects,
                              const std::vector<Group>& groups) {
  if (suspects.empty() || groups.empty()) return {};
  std::string out;
  for (const auto& s : suspects) {
    if (!out.empty()) out += "; ";
    out += fmt::format("rank {} on {} is in {}", s.rank, s.host, s.where);
  }
  // Where they wait, with the line their dumps show, as the odd ranks' places are given.
  const Group& rest = groups.back();
  const Frame& top = rest.top;
  std::string waits = frame_label(top);
  if (!top.file.empty())
    waits +=
        top.line > 0 ? fmt::format(" ({}:{})", top.file, top.line) : fmt::format(" ({})", top.file);
  out += fmt::format(" while {} {} wait in {}", rest.ranks.size() == 1 ? "rank" : "ranks",
                     rank_ranges(rest.ranks), waits);
  return out;
}

std::vector<std::string> write_dumps(const std::string& directory,
                                     const std::vector<RankStack>& stacks) {
  std::vector<std::string> paths;
  for (const auto& rs : stacks) {
    const std::string path = fmt::format("{}/rank_{}.txt", directory, rs.rank);
    std::string text = fmt::format("rank {} on {}\n{}", rs.rank, rs.host, format_stack(rs.stack));
    if (!rs.stack.raw.empty())
      text += fmt::format("\n--- {} output ---\n{}", rs.stack.tool, rs.stack.raw);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw std::runtime_error(fmt::format("cannot write {}: {}", path, strerror(errno)));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace trainrun::stacks
