#include "option_values.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/process.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"

namespace trainrun::launch {

namespace {

const std::pair<const char*, WorkerCount::Kind> kWorkerCountWords[] = {
    {"cpu", WorkerCount::Kind::cpu},
    {"gpu", WorkerCount::Kind::gpu},
    {"xpu", WorkerCount::Kind::xpu},
    {"auto", WorkerCount::Kind::automatic}};

// The signals --signals-to-forward and the stop signals may name.
constexpr int kHandledSignals[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGUSR1,
                                   SIGUSR2, SIGCONT, SIGALRM, SIGXCPU};

}  // namespace

void fail(const std::string& message) { throw UsageError(message); }

std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

int parse_int(const std::string& value, const std::string& what, const char* rule) {
  if (value.empty()) fail(fmt::format("{}: expected {}, got an empty value", what, rule));
  const std::optional<long long> n = parse_integer(value);
  if (!n || *n < INT32_MIN || *n > INT32_MAX) fail(fmt::format("{}: expected {}", what, rule));
  return static_cast<int>(*n);
}

double parse_seconds(const std::string& value, const std::string& what) {
  const std::optional<double> d = parse_number(value);
  if (!d || *d < 0 || *d > 1e9) fail(fmt::format("{}: expected a number of seconds >= 0", what));
  return *d;
}

bool parse_flag_env(const std::string& value, const std::string& what) {
  if (value == "1" || value == "true" || value == "True") return true;
  if (value == "0" || value == "false" || value == "False" || value.empty()) return false;
  fail(fmt::format("{}: expected 0 or 1", what));
}

WorkerCount parse_worker_count(const std::string& value, const std::string& what) {
  WorkerCount count;
  count.source = what;
  for (const auto& [word, kind] : kWorkerCountWords) {
    if (value != word) continue;
    count.kind = kind;
    return count;
  }
  count.number = parse_int(value, what, "a positive integer, cpu, gpu, xpu or auto");
  if (count.number <= 0)
    fail(fmt::format("{}: must be at least 1, or cpu, gpu, xpu or auto", what));
  return count;
}

std::pair<int, int> parse_nnodes(const std::string& value, const std::string& what) {
  auto colon = value.find(':');
  if (colon == std::string::npos) {
    int n = parse_int(value, what, "N or MIN:MAX with positive integers");
    if (n <= 0) fail(fmt::format("{}: the node count must be at least 1", what));
    return {n, n};
  }
  int lo = parse_int(value.substr(0, colon), what, "N or MIN:MAX with positive integers");
  int hi = parse_int(value.substr(colon + 1), what, "N or MIN:MAX with positive integers");
  if (lo <= 0) fail(fmt::format("{}: MIN must be at least 1 (got MIN={})", what, lo));
  if (lo > hi) fail(fmt::format("{}: MIN must not exceed MAX (got MIN={}, MAX={})", what, lo, hi));
  return {lo, hi};
}

StdSpec parse_std_spec(const std::string& value, const std::string& what) {
  const char* rule = "0, 1, 2 or 3, or a per-rank map like 0:1,1:3";
  auto to_std = [&](const std::string& v) {
    int n = parse_int(v, what, rule);
    if (n < static_cast<int>(Std::none) || n > static_cast<int>(Std::all))
      fail(fmt::format("{}: {} is not a stream selection; use {}", what, v, rule));
    return static_cast<Std>(n);
  };
  StdSpec spec;
  if (value.find(':') == std::string::npos) {
    spec.all_ranks = to_std(trim(value));
    return spec;
  }
  spec.is_map = true;
  for (const auto& item : split(value, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos)
      fail(fmt::format("{}: '{}' is not RANK:VALUE; use {}", what, item, rule));
    int rank = parse_int(trim(item.substr(0, colon)), what, rule);
    if (rank < 0) fail(fmt::format("{}: local rank {} is negative", what, rank));
    if (spec.per_rank.count(rank))
      fail(fmt::format("{}: local rank {} is given twice", what, rank));
    spec.per_rank[rank] = to_std(trim(item.substr(colon + 1)));
  }
  return spec;
}

std::map<std::string, std::string> rdzv_conf_entries(const std::string& value,
                                                     const std::string& what) {
  std::map<std::string, std::string> conf;
  if (trim(value).empty()) return conf;
  for (const auto& item : split(value, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      fail(fmt::format("{}: '{}' is not KEY=VALUE (e.g. join_timeout=600,last_call_timeout=30)",
                       what, item));
    std::string key = trim(item.substr(0, eq));
    std::string val = trim(item.substr(eq + 1));
    if (key.empty()) fail(fmt::format("{}: '{}' has an empty key", what, item));
    conf[key] = val;
  }
  return conf;
}

RendezvousConf parse_rdzv_conf(const std::string& value, const std::string& what) {
  return check_rdzv_conf(rdzv_conf_entries(value, what));
}

std::vector<int> parse_rank_list(const std::string& value, const std::string& what) {
  std::vector<int> ranks;
  for (const auto& item : split(value, ',')) {
    int r = parse_int(trim(item), what, "a comma-separated list of local ranks");
    if (r < 0) fail(fmt::format("{}: local rank {} is negative", what, r));
    ranks.push_back(r);
  }
  return ranks;
}

int parse_signal_name(const std::string& name, const std::string& what) {
  std::string upper;
  for (char c : trim(name)) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
  std::vector<std::string> names;
  for (int sig : kHandledSignals) {
    if (upper == signal_name(sig)) return sig;
    names.push_back(signal_name(sig));
  }
  fail(fmt::format("{}: '{}' is not a signal trainrun handles ({})", what, name,
                   fmt::join(names, ", ")));
}

std::vector<std::string> parse_filter_list(const std::string& value) {
  std::vector<std::string> items;
  std::string item;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != ',') {
      item += value[i];
    } else if (i + 1 < value.size() && value[i + 1] == ',') {
      item += ',';  // torchrun's escape, read left to right: ",,," is a comma, then a separator
      ++i;
    } else {
      if (!item.empty()) items.push_back(item);
      item.clear();
    }
  }
  if (!item.empty()) items.push_back(item);
  return items;
}

namespace {

// An ASCII Python identifier: a letter or '_', then letters, digits or '_'.
bool is_identifier(const std::string& part) {
  if (part.empty() || std::isdigit(static_cast<unsigned char>(part[0]))) return false;
  return std::all_of(part.begin(), part.end(), [](char c) {
    return c == '_' || std::isalnum(static_cast<unsigned char>(c));
  });
}

}  // namespace

std::vector<std::string> parse_module_list(const std::string& value, const std::string& what) {
  std::vector<std::string> modules;
  if (value.empty()) return modules;
  for (const std::string& name : split(value, ',')) {
    bool valid = true;
    for (const std::string& part : split(name, '.')) valid = valid && is_identifier(part);
    if (!valid)
      fail(
          fmt::format("{}: '{}' is not a module name; give dotted Python names separated by commas "
                      "(e.g. --preload=torch,numpy)",
                      escape_control(what), escape_control(name)));
    modules.push_back(name);
  }
  return modules;
}

std::vector<std::string> worker_count_words() {
  std::vector<std::string> words;
  for (const auto& word : kWorkerCountWords) words.emplace_back(word.first);
  return words;
}

std::vector<std::string> std_spec_words() {
  std::vector<std::string> words;
  for (int n = static_cast<int>(Std::none); n <= static_cast<int>(Std::all); ++n)
    words.push_back(std::to_string(n));
  return words;
}

std::vector<std::string> handled_signal_names() {
  std::vector<std::string> names;
  for (int sig : kHandledSignals) names.push_back(signal_name(sig));
  return names;
}

std::string nnodes_text(int min_nodes, int max_nodes) {
  return fmt::format("{}:{}", min_nodes, max_nodes);
}

std::string worker_count_text(const WorkerCount& count) {
  for (const auto& [word, kind] : kWorkerCountWords)
    if (count.kind == kind) return word;
  return std::to_string(count.number);
}

std::string seconds_text(double seconds) {
  // The shortest of these that reads back exactly: 30 and 0.1 as written, 1/3 in full.
  std::string text;
  for (int digits = 15; digits <= 17; ++digits) {
    text = fmt::format("{:.{}g}", seconds, digits);
    if (parse_number(text) == seconds) break;
  }
  return text;
}

std::string std_spec_text(const StdSpec& spec) {
  if (!spec.is_map) return std::to_string(static_cast<int>(spec.all_ranks));
  std::string text;
  for (const auto& [rank, std] : spec.per_rank)
    text += fmt::format("{}{}:{}", text.empty() ? "" : ",", rank, static_cast<int>(std));
  return text;
}

std::string rank_list_text(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

std::string signal_list_text(const std::vector<int>& signals) {
  std::string text;
  for (int sig : signals) text += (text.empty() ? "" : ",") + signal_name(sig);
  return text;
}

std::string module_list_text(const std::vector<std::string>& modules) {
  std::string text;
  for (const std::string& name : modules) text += (text.empty() ? "" : ",") + name;
  return text;
}

std::string filter_list_text(const std::vector<std::string>& filters) {
  std::string text;
  for (const std::string& filter : filters) {
    if (!text.empty()) text += ',';
    for (char c : filter) text += c == ',' ? std::string(",,") : std::string(1, c);
  }
  return text;
}

}  // namespace trainrun::launch
