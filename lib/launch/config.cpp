#include "config.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>
#include <set>

#include "gpu_count.hpp"
#include "rendezvous_options.hpp"
#include "version.hpp"

namespace trainrun::launch {

namespace {

// One command-line option: its spellings, its PET_* variable and its default.
struct OptionSpec {
  std::string dashed;  // "nproc-per-node"
  std::string short_name;
  std::string default_value;
  std::string group;
  std::string help;
  bool is_flag = false;

  std::string underscored() const {
    std::string s = dashed;
    for (char& c : s) c = c == '-' ? '_' : c;
    return s;
  }
  std::string pet_name() const {
    std::string s = "PET_" + underscored();
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
};

const std::vector<OptionSpec>& option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"nnodes", "", "1:1", "Topology", "Number of nodes, N or MIN:MAX (elastic)"},
      {"nproc-per-node", "", "1", "Topology",
       "Workers per node: an integer, cpu, gpu or auto"},
      {"node-rank", "", "0", "Topology", "This node's rank (static rendezvous)"},
      {"standalone", "", "0", "Topology",
       "Single-node job with its own rendezvous on a free local port", true},
      {"master-addr", "", "127.0.0.1", "Rendezvous", "Static rendezvous address"},
      {"master-port", "", "29500", "Rendezvous", "Static rendezvous port"},
      {"rdzv-backend", "", "static", "Rendezvous", "static, c10d, etcd or etcd-v2"},
      {"rdzv-endpoint", "", "", "Rendezvous", "Rendezvous endpoint host[:port]"},
      {"rdzv-id", "", "none", "Rendezvous", "Job id: agents of other jobs never join this one"},
      {"rdzv-conf", "", "", "Rendezvous",
       "k=v,...: join_timeout, last_call_timeout, close_timeout, heartbeat_timeout, "
       "keep_alive_interval, is_host, token_file"},
      {"local-addr", "", "", "Rendezvous", "Address this node advertises"},
      {"max-restarts", "", "0", "Supervision", "Restarts of the worker group after a failure"},
      {"monitor-interval", "", "0.1", "Supervision",
       "Accepted for compatibility; trainrun watches workers by events"},
      {"shutdown-timeout", "", "30", "Supervision",
       "Seconds between the stop signal and SIGKILL"},
      {"signals-to-handle", "", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2", "Supervision",
       "Signals forwarded to the workers (SIGUSR1/SIGUSR2 are forwarded without stopping)"},
      {"role", "", "default", "Supervision", "Role name for ROLE_NAME and the output prefix"},
      {"start-method", "", "spawn", "Supervision", "Accepted for compatibility: spawn, fork, forkserver"},
      {"log-dir", "", "", "Output", "Root of the per-attempt, per-rank log files"},
      {"redirects", "r", "0", "Output",
       "Streams to log files: 0 none, 1 stdout, 2 stderr, 3 both; or per rank 0:1,1:3"},
      {"tee", "t", "0", "Output", "Streams to log files and the console, same values"},
      {"local-ranks-filter", "", "", "Output",
       "Comma list of local ranks whose output reaches the console"},
      {"logs-specs", "", "", "Output", "Accepted for compatibility"},
      {"module", "m", "0", "Entrypoint", "Run ENTRYPOINT as a Python module (python -m)", true},
      {"no-python", "", "0", "Entrypoint", "Execute ENTRYPOINT directly, not through Python",
       true},
      {"run-path", "", "0", "Entrypoint", "Run a Python script through runpy (as the default)",
       true},
      {"numa-binding", "", "", "Entrypoint", "Accepted for compatibility"},
  };
  return specs;
}

// CLI11 cannot know that everything after the entrypoint belongs to it.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nUsage: trainrun [OPTIONS] ENTRYPOINT [ARGS...]\n";
  }
};

[[noreturn]] void fail(const std::string& message) { throw UsageError(message); }

int parse_int(const std::string& value, const std::string& what, const char* rule) {
  if (value.empty()) fail(fmt::format("{}: expected {}, got an empty value", what, rule));
  size_t pos = 0;
  long long n = 0;
  try {
    n = std::stoll(value, &pos, 10);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != value.size() || n < INT32_MIN || n > INT32_MAX ||
      std::isspace(static_cast<unsigned char>(value[0])))
    fail(fmt::format("{}: expected {}", what, rule));
  return static_cast<int>(n);
}

double parse_seconds(const std::string& value, const std::string& what) {
  size_t pos = 0;
  double d = -1;
  try {
    d = std::stod(value, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (value.empty() || pos != value.size() || !(d >= 0) || d > 1e9)
    fail(fmt::format("{}: expected a number of seconds >= 0", what));
  return d;
}

bool parse_flag_env(const std::string& value, const std::string& what) {
  if (value == "1" || value == "true" || value == "True") return true;
  if (value == "0" || value == "false" || value == "False" || value.empty()) return false;
  fail(fmt::format("{}: expected 0 or 1", what));
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return parts;
}

int count_usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int parse_nproc(const std::string& value, const std::string& what) {
  if (value == "cpu") return count_usable_cpus();
  if (value == "gpu") {
    int gpus = count_nvidia_gpus();
    if (gpus <= 0) fail(fmt::format("{}: no NVIDIA GPU found on this node; use an integer or cpu", what));
    return gpus;
  }
  if (value == "auto") {
    int gpus = count_nvidia_gpus();
    return gpus > 0 ? gpus : count_usable_cpus();
  }
  int n = parse_int(value, what, "a positive integer, cpu, gpu or auto");
  if (n <= 0) fail(fmt::format("{}: must be at least 1, or cpu, gpu or auto", what));
  return n;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Std StdSpec::for_rank(int local_rank) const {
  if (!is_map) return all_ranks;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Std::none : it->second;
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
    if (n < 0 || n > 3) fail(fmt::format("{}: {} is not a stream selection; use {}", what, v, rule));
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
    if (colon == std::string::npos) fail(fmt::format("{}: '{}' is not RANK:VALUE; use {}", what, item, rule));
    int rank = parse_int(trim(item.substr(0, colon)), what, rule);
    if (rank < 0) fail(fmt::format("{}: local rank {} is negative", what, rank));
    if (spec.per_rank.count(rank)) fail(fmt::format("{}: local rank {} is given twice", what, rank));
    spec.per_rank[rank] = to_std(trim(item.substr(colon + 1)));
  }
  return spec;
}

std::map<std::string, std::string> parse_rdzv_conf(const std::string& value,
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
  check_rdzv_conf(conf);
  return conf;
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
  static const std::vector<std::pair<const char*, int>> known = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
      {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGCONT", SIGCONT}, {"SIGALRM", SIGALRM},
      {"SIGXCPU", SIGXCPU}};
  std::string upper;
  for (char c : trim(name)) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
  for (const auto& [n, v] : known)
    if (upper == n) return v;
  fail(fmt::format("{}: '{}' is not a signal trainrun handles (SIGTERM, SIGINT, SIGHUP, SIGQUIT, "
                   "SIGUSR1, SIGUSR2, SIGCONT, SIGALRM, SIGXCPU)",
                   what, name));
}

std::string expand_local_rank(const std::string& arg, int local_rank) {
  std::string out;
  const std::string rank = std::to_string(local_rank);
  for (size_t i = 0; i < arg.size();) {
    if (arg[i] != '$') {
      out += arg[i++];
    } else if (arg.compare(i, 2, "$$") == 0) {
      out += '$';
      i += 2;
    } else if (arg.compare(i, 13, "${local_rank}") == 0) {
      out += rank;
      i += 13;
    } else if (arg.compare(i, 11, "$local_rank") == 0) {
      out += rank;
      i += 11;
    } else {
      out += arg[i++];
    }
  }
  return out;
}

std::vector<std::string> LaunchConfig::worker_argv() const {
  std::vector<std::string> argv;
  if (entry_mode == EntryMode::executable) {
    argv.push_back(entrypoint);
  } else {
    argv.push_back(python_exec);
    argv.push_back("-u");
    if (entry_mode == EntryMode::python_module) argv.push_back("-m");
    argv.push_back(entrypoint);
  }
  argv.insert(argv.end(), entry_args.begin(), entry_args.end());
  return argv;
}

ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env) {
  CLI::App app{
      "Launch and supervise distributed PyTorch training workers (a torchrun "
      "replacement).\n\nOptions take their defaults from PET_<OPTION> variables, e.g. "
      "PET_NPROC_PER_NODE=8.",
      "trainrun"};

  app.prefix_command();
  app.set_version_flag("--version", std::string("trainrun ") + kVersion);
  app.formatter(std::make_shared<UsageFormatter>());
  app.get_formatter()->column_width(38);

  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
  std::map<std::string, bool> flags;
  for (const auto& spec : option_specs()) {
    std::string names = "--" + spec.dashed;
    if (spec.underscored() != spec.dashed) names += ",--" + spec.underscored();
    if (!spec.short_name.empty()) names = "-" + spec.short_name + "," + names;
    std::string help = spec.help + " [env " + spec.pet_name() + "]";
    CLI::Option* opt;
    if (spec.is_flag) {
      flags[spec.dashed] = false;
      opt = app.add_flag(names, flags[spec.dashed], help);
    } else {
      values[spec.dashed] = spec.default_value;
      opt = app.add_option(names, values[spec.dashed], help);
      if (!spec.default_value.empty()) opt->default_str(spec.default_value);
      opt->type_name("VALUE");
    }
    opt->group(spec.group);
    options[spec.dashed] = opt;
  }

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return {LaunchConfig{}, app.help()};
  } catch (const CLI::CallForAllHelp&) {
    return {LaunchConfig{}, app.help("", CLI::AppFormatMode::All)};
  } catch (const CLI::CallForVersion& e) {
    return {LaunchConfig{}, std::string(e.what()) + "\n"};
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    fail(fmt::format("{} (see trainrun --help)", msg));
  }

  // Where an option is absent from the command line, PET_<NAME> supplies it.
  std::map<std::string, std::string> source;  // how to name the value in an error
  for (const auto& spec : option_specs()) {
    const bool given = options[spec.dashed]->count() > 0;
    auto env_it = env.find(spec.pet_name());
    if (spec.is_flag) {
      if (!given && env_it != env.end())
        flags[spec.dashed] = parse_flag_env(env_it->second, spec.pet_name() + "=" + env_it->second);
      continue;
    }
    if (!given && env_it != env.end()) {
      values[spec.dashed] = env_it->second;
      source[spec.dashed] = spec.pet_name() + "=" + env_it->second;
    } else {
      source[spec.dashed] = "--" + spec.dashed + "=" + values[spec.dashed];
    }
  }

  LaunchConfig c;
  std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(values["nnodes"], source["nnodes"]);
  c.nproc_per_node = parse_nproc(values["nproc-per-node"], source["nproc-per-node"]);
  c.node_rank = parse_int(values["node-rank"], source["node-rank"], "an integer >= 0");
  if (c.node_rank < 0) fail(fmt::format("{}: must be >= 0", source["node-rank"]));
  c.master_addr = values["master-addr"];
  if (c.master_addr.empty()) fail(fmt::format("{}: must not be empty", source["master-addr"]));
  c.master_port = parse_int(values["master-port"], source["master-port"], "a port number 0..65535");
  if (c.master_port < 0 || c.master_port > 65535)
    fail(fmt::format("{}: must be a port number 0..65535", source["master-port"]));
  c.master_port_given = source["master-port"].rfind("PET_", 0) == 0 || options["master-port"]->count() > 0;
  c.rdzv_backend = values["rdzv-backend"];
  check_rdzv_backend(c.rdzv_backend, source["rdzv-backend"]);
  c.rdzv_endpoint = values["rdzv-endpoint"];
  c.rdzv_id = values["rdzv-id"];
  if (c.rdzv_id.empty()) fail(fmt::format("{}: must not be empty", source["rdzv-id"]));
  c.rdzv_conf = parse_rdzv_conf(values["rdzv-conf"], source["rdzv-conf"]);
  c.standalone = flags["standalone"];
  c.max_restarts = parse_int(values["max-restarts"], source["max-restarts"], "an integer >= 0");
  if (c.max_restarts < 0) fail(fmt::format("{}: must be >= 0", source["max-restarts"]));
  c.monitor_interval = parse_seconds(values["monitor-interval"], source["monitor-interval"]);
  if (c.monitor_interval <= 0) fail(fmt::format("{}: must be > 0", source["monitor-interval"]));
  c.shutdown_timeout = parse_seconds(values["shutdown-timeout"], source["shutdown-timeout"]);
  c.role = values["role"];
  if (c.role.empty()) fail(fmt::format("{}: must not be empty", source["role"]));
  c.start_method = values["start-method"];
  if (c.start_method != "spawn" && c.start_method != "fork" && c.start_method != "forkserver")
    fail(fmt::format("{}: use spawn, fork or forkserver", source["start-method"]));
  c.log_dir = values["log-dir"];
  c.redirects = parse_std_spec(values["redirects"], source["redirects"]);
  c.tee = parse_std_spec(values["tee"], source["tee"]);
  if (!trim(values["local-ranks-filter"]).empty())
    c.local_ranks_filter = parse_rank_list(values["local-ranks-filter"], source["local-ranks-filter"]);
  c.local_addr = values["local-addr"];
  for (const auto& name : split(values["signals-to-handle"], ',')) {
    if (trim(name).empty()) continue;
    int sig = parse_signal_name(name, source["signals-to-handle"]);
    auto& list = (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCONT) ? c.forward_signals
                                                                      : c.stop_signals;
    if (std::find(list.begin(), list.end(), sig) == list.end()) list.push_back(sig);
  }
  c.module = flags["module"];
  c.no_python = flags["no-python"];
  c.run_path = flags["run-path"];
  if (c.module && c.no_python)
    fail("-m/--module and --no-python cannot be used together: a module needs Python");

  if (c.standalone) {
    c.min_nodes = c.max_nodes = 1;
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
  }

  auto extra = app.remaining();
  if (extra.empty())
    fail("no entrypoint given: trainrun [OPTIONS] ENTRYPOINT [ARGS...] (see trainrun --help)");
  if (extra[0].size() > 1 && extra[0][0] == '-')
    fail(fmt::format("unknown option {} (see trainrun --help)", extra[0]));
  c.entrypoint = extra[0];
  c.entry_args.assign(extra.begin() + 1, extra.end());

  auto py = env.find("PYTHON_EXEC");
  c.python_exec = (py != env.end() && !py->second.empty()) ? py->second : "python3";
  if (c.module)
    c.entry_mode = EntryMode::python_module;
  else if (c.no_python)
    c.entry_mode = EntryMode::executable;
  else
    c.entry_mode = ends_with(c.entrypoint, ".py") ? EntryMode::python_script
                                                  : EntryMode::executable;
  return {c, std::nullopt};
}

}  // namespace trainrun::launch
