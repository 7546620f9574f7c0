#include "trainrun/launch/output/output_plan.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace trainrun::launch {

OutputPlan plan_output(const LaunchConfig& config, int local_rank, const std::string& rank_dir) {
  const int redirect = static_cast<int>(config.redirects.for_rank(local_rank));
  const int tee = static_cast<int>(config.tee.for_rank(local_rank));
  bool console_allowed = true;
  if (config.local_ranks_filter) {
    const auto& f = *config.local_ranks_filter;
    console_allowed = std::find(f.begin(), f.end(), local_rank) != f.end();
  }
  const std::string attempt_dir = rank_dir.substr(0, rank_dir.find_last_of('/'));
  auto decide = [&](int bit, const char* name, const std::vector<std::string>& filters) {
    StreamPlan p;
    const bool to_file = (redirect & bit) || (tee & bit) || !console_allowed;
    if (!to_file) return p;
    p.file = rank_dir + "/" + name + ".log";
    p.route = ((tee & bit) && console_allowed) ? StreamRoute::tee : StreamRoute::file;
    // As in torchrun, only what is tee'd to the console is duplicated.
    if (p.route == StreamRoute::tee && !filters.empty()) {
      p.duplicate_file = attempt_dir + "/filtered_" + name + ".log";
      p.filters = filters;
    }
    return p;
  };
  return {decide(1, "stdout", config.duplicate_stdout_filters),
          decide(2, "stderr", config.duplicate_stderr_filters)};
}

void capture_inherited(StreamPlan& plan) {
  if (plan.route == StreamRoute::inherit) plan.route = StreamRoute::console;
}

std::string line_prefix(const std::optional<std::string>& templ, const std::string& role, int rank,
                        int local_rank, const std::string& hostname) {
  if (!templ) return "[" + role + std::to_string(local_rank) + "]:";
  const std::pair<const char*, std::string> names[] = {{"role_name", role},
                                                       {"rank", std::to_string(rank)},
                                                       {"local_rank", std::to_string(local_rank)},
                                                       {"hostname", hostname}};
  const std::string& t = *templ;
  std::string out;
  for (size_t i = 0; i < t.size();) {
    if (t[i] != '$') {
      out += t[i++];
      continue;
    }
    if (t.compare(i, 2, "$$") == 0) {
      out += '$';
      i += 2;
      continue;
    }
    bool matched = false;
    for (const auto& [name, value] : names) {
      const std::string braced = std::string("${") + name + "}";
      const std::string bare = std::string("$") + name;
      if (t.compare(i, braced.size(), braced) == 0) {
        out += value;
        i += braced.size();
        matched = true;
        break;
      }
      // A bare $name ends where an identifier ends ($rank must not eat $rank_x).
      if (t.compare(i, bare.size(), bare) == 0) {
        size_t end = i + bare.size();
        if (end < t.size() && (std::isalnum(static_cast<unsigned char>(t[end])) || t[end] == '_'))
          continue;
        out += value;
        i = end;
        matched = true;
        break;
      }
    }
    if (!matched) out += t[i++];
  }
  return out;
}

}  // namespace trainrun::launch
