#include "trainrun/launch/cli/command_line.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>

#include "option_values.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/cli/cli_docs.hpp"
#include "trainrun/launch/cli/config_file.hpp"
#include "trainrun/launch/clusters/slurm.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/manual.hpp"
#include "trainrun/launch/hosts/host_list.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"
#include "trainrun/launch/version.hpp"
#include "trainrun/rendezvous/endpoint.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

namespace {

// The groups of --help, in the order the table below lists them.
constexpr const char* kJob = "Job";
constexpr const char* kNodes = "Nodes and rendezvous";
constexpr const char* kHosts = "Many hosts over ssh";
constexpr const char* kOutput = "Workers' output";
constexpr const char* kFailures = "Failures and signals";
constexpr const char* kDiagnosis = "Diagnosis";
constexpr const char* kItself = "trainrun itself";

// One command-line option: its spellings, its PET_* variable and its default.
struct OptionSpec {
  std::string dashed;  // "nproc-per-node"
  std::string short_name;
  // The text of LaunchConfig{}'s value, where the defaults live; empty for none. A flag has none:
  // it is off unless given.
  std::string default_value;
  std::string group;
  // --help's one line; empty: the option is only named at the end of its group there.
  std::string summary;
  // --help-all's and the man page's full description.
  std::string help;
  bool is_flag = false;
  // Read where neither the command line nor PET_<NAME> gives a value, as torchrun does.
  std::string fallback_env = {};
  // What --help and the man page add to the default, in parentheses.
  std::string default_note = {};
  // Given several times, its values are joined by newlines (-x NAME -x NAME2).
  bool repeatable = false;
  // The words the value is one of (or, for a list, made of), as its parser reads them: the
  // completion scripts offer them.
  std::vector<std::string> values = {};
  bool value_list = false;  // comma-separated (--signals-to-handle, -r 0:1,1:3)

  std::string underscored() const {
    std::string s = dashed;
    for (char& c : s) c = c == '-' ? '_' : c;
    return s;
  }
  // What acts at once (--print-completion, --print-config) or names the file (--config) has no
  // PET_* variable and no key in a configuration file.
  bool is_setting() const {
    return dashed != "print-completion" && dashed != "print-config" && dashed != "config";
  }
  std::string pet_name() const {
    std::string s = "PET_" + underscored();
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
};

// --preflight's values.
const std::pair<const char*, PreflightMode> kPreflightModes[] = {
    {"on", PreflightMode::on}, {"warn", PreflightMode::warn}, {"off", PreflightMode::off}};

const char* preflight_text(PreflightMode mode) {
  for (const auto& [name, value] : kPreflightModes)
    if (mode == value) return name;
  return "on";
}

std::vector<std::string> preflight_words() {
  std::vector<std::string> words;
  for (const auto& mode : kPreflightModes) words.emplace_back(mode.first);
  return words;
}

std::vector<std::string> backend_words() {
  std::vector<std::string> words;
  for (const RendezvousBackend backend : kRendezvousBackends)
    words.emplace_back(backend_name(backend));
  return words;
}

// --signals-to-handle's text for a configuration: the signals that stop the job, then those only
// forwarded.
std::string handled_signals_text(const LaunchConfig& c) {
  std::vector<int> signals = c.stop_signals;
  signals.insert(signals.end(), c.forward_signals.begin(), c.forward_signals.end());
  return signal_list_text(signals);
}

std::vector<OptionSpec> make_option_specs() {
  // Each option shows the value of its field in LaunchConfig{} (HostsOptions{} for --ssh), where
  // the defaults are written once. An empty text is no value (no --rdzv-conf key, no filter).
  const LaunchConfig d;
  const HostsOptions hosts;
  std::string ssh;
  for (const std::string& word : hosts.ssh) ssh += (ssh.empty() ? "" : " ") + word;
  return {
      {"nproc-per-node", "", worker_count_text(d.nproc_per_node), kJob,
       "Workers per node: N, cpu, gpu, xpu or auto",
       "Workers per node: an integer, cpu, gpu, xpu or auto", false, "", "", false,
       worker_count_words()},
      {"module", "m", "", kJob, "Run ENTRYPOINT as a Python module",
       "Run ENTRYPOINT as a Python module (python -m)", true},
      {"no-python", "", "", kJob, "Run ENTRYPOINT as a program, not by Python",
       "Execute ENTRYPOINT directly, not through Python", true},
      {"run-path", "", "", kJob, "", "Run a Python script through runpy (as the default)", true},
      {"preload", "", module_list_text(d.preload), kJob,
       "Fork Python workers from one that imported these",
       "MODULE,...: Python workers are forked from one interpreter per node that imported these "
       "modules once (e.g. torch)"},
      {"numa-binding",
       "",
       d.numa_binding,
       kJob,
       "Bind each worker to CPUs near its GPU",
       "node, socket, exclusive or core-complex: bind each worker to CPUs near its GPU",
       false,
       "",
       "",
       false,
       {"node", "socket", "exclusive", "core-complex"}},
      {"virtual-local-rank", "", "", kJob, "",
       "Every worker gets LOCAL_RANK=0 and its own GPU as the only one in CUDA_VISIBLE_DEVICES",
       true},
      {"role", "", d.role, kJob, "", "Role name for ROLE_NAME and the output prefix"},
      {"config", "", "", kJob, "Option values from a TOML file",
       "A TOML file of option values, keyed by long option names; the command line wins over "
       "it, it wins over PET_*"},
      {"print-config", "", "", kJob, "Print the configuration as such a file and exit",
       "Print the effective configuration of the command line as such a file and exit", true},
      {"nnodes", "", nnodes_text(d.min_nodes, d.max_nodes), kNodes, "Nodes: N or MIN:MAX (elastic)",
       "Number of nodes, N or MIN:MAX (elastic)"},
      {"node-rank", "", std::to_string(d.node_rank), kNodes, "This node's rank",
       "This node's rank (static); the rank it asks for (c10d, etcd)"},
      {"standalone", "", "", kNodes, "One node, its own rendezvous on a free port",
       "Single-node job with its own rendezvous on a free local port", true},
      {"slurm", "", "", kNodes, "Take the job's layout from the srun step",
       "Take nodes, node rank, rendezvous host, run id and workers from the srun step (automatic "
       "in a step when no rendezvous option is given); given options still win",
       true},
      {"master-addr", "", d.master_addr, kNodes, "Static rendezvous address",
       "Static rendezvous address"},
      {"master-port", "", std::to_string(d.master_port), kNodes, "Static rendezvous port",
       "Static rendezvous port", false, "", "one node: a free port"},
      {"rdzv-backend", "", backend_name(d.rdzv_backend), kNodes, "static, c10d, etcd or etcd-v2",
       "static, c10d, etcd or etcd-v2", false, "", "", false, backend_words()},
      {"rdzv-endpoint", "", d.rdzv_endpoint, kNodes, "Rendezvous HOST[:PORT]",
       "Rendezvous endpoint host[:port]"},
      {"rdzv-id", "", d.rdzv_id, kNodes, "Job id: other jobs' agents never join",
       "Job id: agents of other jobs never join this one"},
      {"rdzv-conf", "", "", kNodes, "",
       "k=v,...: join_timeout, last_call_timeout, heartbeat_timeout, keep_alive_interval, "
       "keep_alive_max_attempt, is_host, token_file, token_file_mode, rdzv_port"},
      {"local-addr", "", d.local_addr, kNodes, "", "Address this node advertises"},
      {"preflight", "", preflight_text(d.preflight), kNodes,
       "Check the nodes first: on, warn or off",
       "Checks of a multi-node job before its workers start (links, MASTER_ADDR, same trainrun, "
       "entrypoint, Python and torch): on, warn (differences only warn) or off",
       false, "", "", false, preflight_words()},
      {"no-preflight", "", "", kNodes, "", "Skip the preflight (--preflight=off)", true},
      // Many hosts from one terminal (hosts/): trainrun starts an agent on each over ssh.
      {"hosts", "", hosts.hosts, kHosts, "Run on these hosts: HOST:SLOTS,...",
       "HOST:SLOTS,...: run the job on these hosts, one agent each over ssh; node ranks in this "
       "order, the first hosts the rendezvous"},
      {"hostfile", "", hosts.hostfile, kHosts, "Run on the hosts of this file",
       "File of hosts, one per line: HOST slots=N (DeepSpeed, Open MPI), HOST:N or HOST"},
      {"include", "", hosts.include, kHosts, "Only these hosts or GPUs of the list",
       "Only these hosts or GPU slots of the list: HOST[:I,J]@HOST..."},
      {"exclude", "", hosts.exclude, kHosts, "Leave out these hosts or GPUs",
       "Leave out these hosts or GPU slots: HOST[:I,J]@HOST..."},
      {"ssh", "", ssh, kHosts, "", "The ssh command with its options, e.g. \"ssh -p 2222 -i KEY\"",
       false, "TRAINRUN_SSH"},
      {"forward-env", "x", "", kHosts, "Set NAME[=VALUE] on every host",
       "NAME or NAME=VALUE: set in the agents' environment on every host (repeatable)", false, "",
       "", true},
      {"dedup", "", "", kHosts, "Print a line many ranks print once",
       "Print a line that many ranks print within a second once, with the ranks: [0-15]:...", true},
      {"log-dir", "", d.log_dir, kOutput, "Directory of the per-rank log files",
       "Root of the per-attempt, per-rank log files"},
      {"redirects", "r", std_spec_text(d.redirects), kOutput,
       "Streams to log files: 0-3, or per rank 0:1,1:3",
       "Streams to log files: 0 none, 1 stdout, 2 stderr, 3 both; or per rank 0:1,1:3", false, "",
       "", false, std_spec_words(), true},
      {"tee", "t", std_spec_text(d.tee), kOutput, "Streams to log files and the console",
       "Streams to log files and the console, same values", false, "", "", false, std_spec_words(),
       true},
      {"local-ranks-filter", "", d.local_ranks_filter ? rank_list_text(*d.local_ranks_filter) : "",
       kOutput, "Local ranks whose output is shown",
       "Comma list of local ranks whose output reaches the console"},
      {"log-line-prefix-template", "", d.log_line_prefix_template.value_or(""), kOutput, "",
       "Console prefix of tee'd lines: ${role_name}, ${rank}, ${local_rank}, ${hostname}", false,
       "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"},
      {"duplicate-stdout-filters", "", filter_list_text(d.duplicate_stdout_filters), kOutput, "",
       "Comma list (,, for a comma): tee'd stdout lines containing one are also written to "
       "attempt_<k>/filtered_stdout.log"},
      {"duplicate-stderr-filters", "", filter_list_text(d.duplicate_stderr_filters), kOutput, "",
       "The same for stderr, into attempt_<k>/filtered_stderr.log"},
      {"logs-specs", "", "", kOutput, "", "Accepted for compatibility (warns: no effect)"},
      {"max-restarts", "", std::to_string(d.max_restarts), kFailures,
       "Restarts of the workers after a failure", "Restarts of the worker group after a failure"},
      {"shutdown-timeout", "", seconds_text(d.shutdown_timeout), kFailures,
       "Seconds from the stop signal to SIGKILL", "Seconds between the stop signal and SIGKILL",
       false, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
      {"exit-grace", "", seconds_text(d.exit_grace), kFailures,
       "Seconds a finished script's process may take to exit",
       "Seconds a Python worker whose script returned may take to exit (destroy_process_group, "
       "atexit, threads) before it is named with its stack and ended; its script's status "
       "stands. 0: off"},
      {"signals-to-handle", "", handled_signals_text(d), kFailures,
       "Signals passed on to the workers",
       "Signals forwarded to the workers (SIGUSR1/SIGUSR2 are forwarded without stopping)", false,
       "", "", false, handled_signal_names(), true},
      {"monitor-interval", "", seconds_text(d.monitor_interval), kFailures, "",
       "Accepted for compatibility; trainrun watches workers by events"},
      {"start-method",
       "",
       "spawn",
       kFailures,
       "",
       "Accepted for compatibility: spawn, fork, forkserver",
       false,
       "",
       "",
       false,
       {"spawn", "fork", "forkserver"}},
      {"event-log-handler",
       "",
       d.event_log_handler,
       kFailures,
       "",
       "null, console or dynamic_rendezvous: accepted (warns unless null: no events recorded)",
       false,
       "",
       "",
       false,
       {"null", "console", "dynamic_rendezvous"}},
      {"hang-timeout", "", seconds_text(d.hang_timeout), kDiagnosis,
       "Seconds without progress before stacks, stop",
       "Seconds without progress (output, a heartbeat, a file-timer request) on every node after "
       "which the job's stacks are taken twice; a job whose ranks neither moved nor computed is "
       "reported as hung and stopped (exit 124); a rank at a terminal's prompt pauses it. 0: off"},
      {"no-diagnosis", "", "", kDiagnosis, "Python workers without trainrun's diagnosis channel",
       "Start Python workers as torchrun does, without trainrun's diagnosis channel: "
       "--hang-timeout and --stacks then read no flight recorder, only stacks (py-spy, eu-stack, "
       "/proc)",
       true},
      {"summary-file", "", d.summary_file, kDiagnosis, "Write a JSON job summary here at exit",
       "Write a JSON job summary (attempts, worker exits, root cause, timings) to PATH at exit"},
      // trainrun's own options (torchrun has none of these): how trainrun reports on itself.
      {"quiet", "q", "", kItself, "Only trainrun's error lines",
       "Only trainrun's error lines (workers' output as usual)", true},
      {"verbose", "v", "", kItself, "Also trainrun's debug lines", "Also trainrun's debug lines",
       true},
      {"log-timestamps", "", "", kItself, "UTC time and level on trainrun's lines",
       "UTC time (ISO 8601) and level on trainrun's own lines; also TRAINRUN_LOG_FORMAT=timestamps",
       true},
      {"print-completion", "", "", kItself, "Print a completion script and exit",
       "Print a bash, zsh or tcsh completion script and exit", false, "", "", false,
       completion_shells()},
  };
}

const std::vector<OptionSpec>& option_specs() {
  static const std::vector<OptionSpec> specs = make_option_specs();
  return specs;
}

const OptionSpec& spec_of(const std::string& dashed) {
  const auto& specs = option_specs();
  return *std::find_if(specs.begin(), specs.end(),
                       [&](const OptionSpec& spec) { return spec.dashed == dashed; });
}

// The default of the option `dashed`, as --help shows it.
const std::string& default_text(const std::string& dashed) { return spec_of(dashed).default_value; }

// "use spawn, fork or forkserver": the words an option takes, as its error names them.
std::string use_one_of(const std::string& dashed) {
  const std::vector<std::string>& words = spec_of(dashed).values;
  std::string text = "use";
  for (size_t i = 0; i < words.size(); ++i)
    text += (i == 0 ? " " : i + 1 == words.size() ? " or " : ", ") + words[i];
  return text;
}

// Whether `value` is one of the words the option `dashed` takes.
bool is_one_of(const std::string& dashed, const std::string& value) {
  const std::vector<std::string>& words = spec_of(dashed).values;
  return std::find(words.begin(), words.end(), value) != words.end();
}

// The options' values as written (on the command line, else in PET_*), and how to name each one
// in an error ("--nnodes=0", "PET_NNODES=0").
struct GivenValues {
  std::map<std::string, std::string> values;
  std::map<std::string, std::string> source;
  std::map<std::string, bool> flags;
  std::map<std::string, CLI::Option*> options;
  std::set<std::string> from_config;

  const std::string& value(const std::string& name) const { return values.at(name); }
  const std::string& named(const std::string& name) const { return source.at(name); }
  bool flag(const std::string& name) const { return flags.at(name); }
};

// Whether an option's value was given (command line, --config, PET_* or a fallback variable),
// not its default. Not for flags.
bool given_explicitly(const GivenValues& g, const std::string& name);

// Declares every option of option_specs() to CLI11, bound to `given`.
void add_options(CLI::App& app, GivenValues& given) {
  for (const auto& spec : option_specs()) {
    std::string names = "--" + spec.dashed;
    if (spec.underscored() != spec.dashed) names += ",--" + spec.underscored();
    if (!spec.short_name.empty()) names = "-" + spec.short_name + "," + names;
    std::string help = spec.help;
    // --print-completion acts at once, as in torchrun: no variable can ask for it.
    if (spec.is_setting())
      help += " [env " + spec.pet_name() +
              (spec.fallback_env.empty() ? "" : ", then " + spec.fallback_env) + "]";
    CLI::Option* opt;
    if (spec.is_flag) {
      given.flags[spec.dashed] = false;
      opt = app.add_flag(names, given.flags[spec.dashed], help);
    } else {
      given.values[spec.dashed] = spec.default_value;
      opt = app.add_option(names, given.values[spec.dashed], help);
      if (spec.repeatable) opt->multi_option_policy(CLI::MultiOptionPolicy::Join);
      if (!spec.default_value.empty())
        opt->default_str(spec.default_note.empty()
                             ? spec.default_value
                             : spec.default_value + " (" + spec.default_note + ")");
      opt->type_name("VALUE");
    }
    opt->group(spec.group);
    given.options[spec.dashed] = opt;
  }
}

// trainrun's command line: the one table behind --help, the man page and the completion scripts.
std::unique_ptr<CLI::App> make_app(GivenValues& given) {
  auto app = std::make_unique<CLI::App>("", "trainrun");
  app->prefix_command();
  add_options(*app, given);
  // After the table, so that they close its last group (cli_docs.hpp renders --help).
  app->set_help_flag("-h,--help", "Print this summary and exit")->group(kItself);
  app->set_help_all_flag("--help-all,--help_all", "Print every option in full and exit")
      ->group(kItself);
  app->set_version_flag("--version", std::string("trainrun ") + kVersion,
                        "Print trainrun's version and exit")
      ->group(kItself);
  return app;
}

// Where an option is absent from the command line, the --config file supplies it, else
// PET_<NAME>.
void apply_environment(const std::map<std::string, std::string>& env, const ConfigEntries& config,
                       const std::string& config_path, GivenValues& given) {
  for (const auto& spec : option_specs()) {
    if (!spec.is_setting()) continue;
    const bool on_command_line = given.options.at(spec.dashed)->count() > 0;
    auto config_it = config.find(spec.dashed);
    const bool from_config = !on_command_line && config_it != config.end();
    if (from_config) given.from_config.insert(spec.dashed);
    auto env_it = env.find(spec.pet_name());
    const bool from_env = !on_command_line && !from_config && env_it != env.end();
    if (spec.is_flag) {
      if (from_config)
        given.flags[spec.dashed] = config_it->second.value == "true";
      else if (from_env)
        given.flags[spec.dashed] =
            parse_flag_env(env_it->second, spec.pet_name() + "=" + env_it->second);
      continue;
    }
    auto fallback_it = spec.fallback_env.empty() ? env.end() : env.find(spec.fallback_env);
    if (from_config) {
      given.values[spec.dashed] = config_it->second.value;
      given.source[spec.dashed] = fmt::format("{}:{}: {}={}", config_path, config_it->second.line,
                                              spec.dashed, config_it->second.value);
    } else if (from_env) {
      given.values[spec.dashed] = env_it->second;
      given.source[spec.dashed] = spec.pet_name() + "=" + env_it->second;
    } else if (!on_command_line && !from_config && fallback_it != env.end()) {
      given.values[spec.dashed] = fallback_it->second;
      given.source[spec.dashed] = spec.fallback_env + "=" + fallback_it->second;
    } else {
      given.source[spec.dashed] = "--" + spec.dashed + "=" + given.values[spec.dashed];
    }
  }
}

// The --config file's entries: every option but those that are not settings.
ConfigEntries read_config(const GivenValues& given, const ConfigReader& read_text) {
  std::map<std::string, bool> settings;
  for (const auto& spec : option_specs())
    if (spec.is_setting()) settings[spec.dashed] = !spec.is_flag;
  const std::string& path = given.value("config");
  return parse_config(read_text(path), path, settings);
}

// --print-config: every setting as a line of a --config file; those that nothing set are
// commented out, so that the file reads back as the same configuration.
std::string print_config(const GivenValues& given) {
  std::string text =
      "# trainrun --config FILE ENTRYPOINT [ARGS...]; the command line wins over these values.\n"
      "# The lines commented out give the defaults.\n";
  for (const auto& spec : option_specs()) {
    if (!spec.is_setting()) continue;
    bool set;
    std::string value;
    if (spec.is_flag) {
      set = given.flags.at(spec.dashed);
      value = set ? "true" : "false";
    } else {
      set = given_explicitly(given, spec.dashed);
      value = given.value(spec.dashed);
    }
    text += (set ? "" : "# ") + config_line(spec.dashed, value, spec.is_flag) + "\n";
  }
  return text;
}

void read_topology(const GivenValues& g, LaunchConfig& c) {
  std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(g.value("nnodes"), g.named("nnodes"));
  c.virtual_local_rank = g.flag("virtual-local-rank");
  // The machine's bound on it is checked apart, before a job starts (check_machine_limits).
  c.nproc_per_node = parse_worker_count(g.value("nproc-per-node"), g.named("nproc-per-node"));
  c.node_rank = parse_int(g.value("node-rank"), g.named("node-rank"), "an integer >= 0");
  if (c.node_rank < 0) fail(fmt::format("{}: must be >= 0", g.named("node-rank")));
  c.node_rank_given = given_explicitly(g, "node-rank");
  c.master_addr = g.value("master-addr");
  if (c.master_addr.empty()) fail(fmt::format("{}: must not be empty", g.named("master-addr")));
  c.master_port =
      parse_int(g.value("master-port"), g.named("master-port"), "a port number 0..65535");
  if (c.master_port < 0 || c.master_port > 65535)
    fail(fmt::format("{}: must be a port number 0..65535", g.named("master-port")));
  c.master_port_given = g.named("master-port").rfind("PET_", 0) == 0 ||
                        g.options.at("master-port")->count() > 0 ||
                        g.from_config.count("master-port") > 0;
}

void read_rendezvous(const GivenValues& g, LaunchConfig& c) {
  c.rdzv_backend = parse_rdzv_backend(g.value("rdzv-backend"), g.named("rdzv-backend"));
  c.rdzv_endpoint = g.value("rdzv-endpoint");
  c.rdzv_id = g.value("rdzv-id");
  if (c.rdzv_id.empty()) fail(fmt::format("{}: must not be empty", g.named("rdzv-id")));
  // Refused here on every node, one node included, rather than by the rendezvous of a larger job.
  if (c.rdzv_id.size() > rendezvous::kMaxNameLength)
    fail(fmt::format("{}...: {} bytes; a run id has at most {} (the rendezvous protocol's limit)",
                     utf8_prefix(g.named("rdzv-id"), 40), c.rdzv_id.size(),
                     rendezvous::kMaxNameLength));
  // Each node sends it as JSON text and the rendezvous compares it byte for byte: bytes that are
  // not UTF-8 would arrive as U+FFFD and never match.
  if (const std::string_view valid = valid_utf8_prefix(c.rdzv_id); valid.size() < c.rdzv_id.size())
    fail(
        fmt::format("{}...: byte 0x{:02X} is not UTF-8; a run id travels between nodes as text, "
                    "so it must be UTF-8",
                    escape_control(utf8_prefix(valid_utf8_prefix(g.named("rdzv-id")), 40)),
                    static_cast<unsigned char>(c.rdzv_id[valid.size()])));
  c.rdzv_conf = parse_rdzv_conf(g.value("rdzv-conf"), g.named("rdzv-conf"));
  c.standalone = g.flag("standalone");
  c.local_addr = g.value("local-addr");
  const auto mode = std::find_if(std::begin(kPreflightModes), std::end(kPreflightModes),
                                 [&](const auto& m) { return g.value("preflight") == m.first; });
  if (mode == std::end(kPreflightModes))
    fail(fmt::format("{}: {}", g.named("preflight"), use_one_of("preflight")));
  c.preflight = mode->second;
  if (g.flag("no-preflight")) {
    if (c.preflight == PreflightMode::warn)
      fail(fmt::format("--no-preflight and {} cannot be used together: choose one",
                       g.named("preflight")));
    c.preflight = PreflightMode::off;
  }
}

// torchrun's static rendezvous takes the master address and port from --rdzv-endpoint when it is
// given, from --master-addr/--master-port otherwise (get_rdzv_endpoint).
void read_static_endpoint(const GivenValues& g, LaunchConfig& c) {
  if (c.standalone || c.rdzv_backend != RendezvousBackend::static_ || c.rdzv_endpoint.empty())
    return;
  rendezvous::HostPort endpoint;
  try {
    endpoint = rendezvous::parse_endpoint(c.rdzv_endpoint, -1);
  } catch (const std::invalid_argument& e) {
    fail(fmt::format("--rdzv-endpoint={}", e.what()));
  }
  if (endpoint.port == -1)
    fail(fmt::format(
        "{}: the static backend needs HOST:PORT (the master port, the same on every node)",
        g.named("rdzv-endpoint")));
  c.master_addr = endpoint.host;
  c.master_port = endpoint.port;
  c.master_port_given = true;
}

void read_supervision(const GivenValues& g, LaunchConfig& c) {
  c.max_restarts = parse_int(g.value("max-restarts"), g.named("max-restarts"), "an integer >= 0");
  if (c.max_restarts < 0) fail(fmt::format("{}: must be >= 0", g.named("max-restarts")));
  c.monitor_interval = parse_seconds(g.value("monitor-interval"), g.named("monitor-interval"));
  if (c.monitor_interval <= 0) fail(fmt::format("{}: must be > 0", g.named("monitor-interval")));
  c.shutdown_timeout = parse_seconds(g.value("shutdown-timeout"), g.named("shutdown-timeout"));
  c.hang_timeout = parse_seconds(g.value("hang-timeout"), g.named("hang-timeout"));
  c.no_diagnosis = g.flag("no-diagnosis");
  c.exit_grace = parse_seconds(g.value("exit-grace"), g.named("exit-grace"));
  // The watch wakes at most once a second; a shorter silence is no sign of a hang.
  if (c.hang_timeout > 0 && c.hang_timeout < 1)
    fail(fmt::format("{}: must be 0 (off) or at least 1 second", g.named("hang-timeout")));
  c.role = g.value("role");
  if (c.role.empty()) fail(fmt::format("{}: must not be empty", g.named("role")));
  // Accepted for compatibility and checked, but trainrun always starts workers one way.
  if (!is_one_of("start-method", g.value("start-method")))
    fail(fmt::format("{}: {}", g.named("start-method"), use_one_of("start-method")));
  // The handlers torchrun registers; a name it does not know fails there too.
  c.event_log_handler = g.value("event-log-handler");
  if (!is_one_of("event-log-handler", c.event_log_handler))
    fail(fmt::format("{}: unknown event log handler; {}", g.named("event-log-handler"),
                     use_one_of("event-log-handler")));
}

void read_output(const GivenValues& g, LaunchConfig& c) {
  c.log_dir = g.value("log-dir");
  c.redirects = parse_std_spec(g.value("redirects"), g.named("redirects"));
  c.tee = parse_std_spec(g.value("tee"), g.named("tee"));
  if (!trim(g.value("local-ranks-filter")).empty())
    c.local_ranks_filter =
        parse_rank_list(g.value("local-ranks-filter"), g.named("local-ranks-filter"));
  // An empty template means the default prefix, as in torchrun.
  if (!g.value("log-line-prefix-template").empty())
    c.log_line_prefix_template = g.value("log-line-prefix-template");
  c.duplicate_stdout_filters = parse_filter_list(g.value("duplicate-stdout-filters"));
  c.duplicate_stderr_filters = parse_filter_list(g.value("duplicate-stderr-filters"));
}

// --numa-binding (workers/numa_binding.hpp), then the options trainrun accepts for torchrun's
// sake and checks, but that change nothing here.
void read_ignored(const GivenValues& g, LaunchConfig& c) {
  c.numa_binding = g.value("numa-binding");
  // Given empty, a mode torchrun does not know either (argparse's choices).
  if ((!c.numa_binding.empty() || given_explicitly(g, "numa-binding")) &&
      !is_one_of("numa-binding", c.numa_binding))
    fail(fmt::format("{}: {}", g.named("numa-binding"), use_one_of("numa-binding")));
}

std::vector<std::string> ignored_option_warnings(const GivenValues& g, const LaunchConfig& c) {
  std::vector<std::string> out;
  if (c.event_log_handler != "null")
    out.push_back(
        fmt::format("warning: {} is accepted but ignored: trainrun records no elastic events",
                    g.named("event-log-handler")));
  if (!g.value("logs-specs").empty())
    out.push_back(fmt::format(
        "warning: {} is accepted but ignored: trainrun has no pluggable log specs; logs follow "
        "--log-dir, --redirects and --tee",
        g.named("logs-specs")));
  return out;
}

// trainrun's own options: -q/-v, --log-timestamps (or TRAINRUN_LOG_FORMAT), --summary-file.
void read_launcher_output(const GivenValues& g, const std::map<std::string, std::string>& env,
                          LaunchConfig& c) {
  if (g.flag("quiet") && g.flag("verbose"))
    fail("-q/--quiet and -v/--verbose cannot be used together");
  c.verbosity = g.flag("quiet")     ? Verbosity::quiet
                : g.flag("verbose") ? Verbosity::verbose
                                    : Verbosity::normal;
  c.log_timestamps = g.flag("log-timestamps");
  auto format = env.find("TRAINRUN_LOG_FORMAT");
  const bool flag_given = g.options.at("log-timestamps")->count() > 0 ||
                          g.from_config.count("log-timestamps") > 0 ||
                          env.count("PET_LOG_TIMESTAMPS") > 0;
  if (!flag_given && format != env.end()) {
    if (format->second == "timestamps")
      c.log_timestamps = true;
    else if (format->second != "plain" && !format->second.empty())
      fail(fmt::format("TRAINRUN_LOG_FORMAT={}: use timestamps or plain", format->second));
  }
  c.summary_file = g.value("summary-file");
}

// SIGUSR1, SIGUSR2 and SIGCONT are only passed on to the workers; the others stop the job.
void read_signals(const GivenValues& g, LaunchConfig& c) {
  // Workers see what torchrun 2.x would give them (LaunchConfig's default): trainrun's own
  // SIGUSR1/SIGUSR2 are not part of it (they stop nothing here).
  if (given_explicitly(g, "signals-to-handle")) c.signals_to_handle = g.value("signals-to-handle");
  std::vector<int> stop, forward;
  for (const auto& name : split(g.value("signals-to-handle"), ',')) {
    if (trim(name).empty()) continue;
    int sig = parse_signal_name(name, g.named("signals-to-handle"));
    auto& list = (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCONT) ? forward : stop;
    if (std::find(list.begin(), list.end(), sig) == list.end()) list.push_back(sig);
  }
  // No signal handled would leave a stopped trainrun's workers to the watchdog alone.
  if (stop.empty() && forward.empty())
    fail(fmt::format("{}: names no signal; leave it out for the default {}",
                     g.named("signals-to-handle"), default_text("signals-to-handle")));
  c.stop_signals = stop;
  c.forward_signals = forward;
}

// The entrypoint, its arguments (everything after it), and how it runs.
void read_entrypoint(const GivenValues& g, const std::vector<std::string>& rest,
                     const std::map<std::string, std::string>& env, LaunchConfig& c) {
  c.module = g.flag("module");
  c.no_python = g.flag("no-python");
  if (c.module && c.no_python)
    fail("-m/--module and --no-python cannot be used together: a module needs Python");
  // Whether the program is Python is known once the entrypoint is resolved (check_preload).
  c.preload = parse_module_list(g.value("preload"), g.named("preload"));
  // "--" ends the options: what follows is the entrypoint, even one that starts with "-".
  const bool after_dashes = !rest.empty() && rest[0] == "--";
  const size_t entry = after_dashes ? 1 : 0;
  if (rest.size() <= entry)
    fail("no entrypoint given: trainrun [OPTIONS] ENTRYPOINT [ARGS...] (see trainrun --help)");
  if (!after_dashes && rest[0].size() > 1 && rest[0][0] == '-')
    fail(fmt::format("unknown option {} (see trainrun --help)", rest[0]));
  c.entrypoint = rest[entry];
  c.entry_args.assign(rest.begin() + static_cast<std::ptrdiff_t>(entry) + 1, rest.end());

  if (auto py = env.find("PYTHON_EXEC"); py != env.end() && !py->second.empty()) {
    c.python_exec = py->second;
    c.python_source = PythonSource::variable;
  }
  if (c.module)
    c.entry_mode = EntryMode::python_module;
  else if (c.no_python)
    c.entry_mode = EntryMode::executable;
  else
    c.entry_mode =
        trainrun::ends_with(c.entrypoint, ".py") ? EntryMode::python_script : EntryMode::executable;
}

// ---- Cluster managers: the job's layout from a Slurm step (slurm.hpp) ----------------------
// A PyTorchJob on Kubernetes needs nothing here: its PET_* variables are the options' defaults.

// Where the job's rendezvous is. Given any of them (on the command line or as PET_*), trainrun
// takes nothing from Slurm unless --slurm asks it to.
const char* const kLayoutOptions[] = {"nnodes",       "node-rank",     "master-addr", "master-port",
                                      "rdzv-backend", "rdzv-endpoint", "rdzv-id"};

bool given_explicitly(const GivenValues& g, const std::string& name) {
  return g.options.at(name)->count() > 0 || g.from_config.count(name) > 0 ||
         g.named(name).rfind("--", 0) != 0;
}

// Fills the options not given from the srun step, naming the variable each came from. Returns
// the line that says what was taken, or nothing when trainrun is not taking its layout from Slurm.
std::optional<std::string> apply_slurm(const std::map<std::string, std::string>& env,
                                       GivenValues& g) {
  const bool forced = g.flag("slurm");
  bool layout_given = g.flag("standalone");
  for (const char* name : kLayoutOptions) layout_given = layout_given || given_explicitly(g, name);
  if (!in_slurm_step(env)) {
    if (forced)
      fail(
          fmt::format("--slurm: not inside a Slurm job step ({} unset); start trainrun with "
                      "srun --ntasks-per-node=1",
                      kSlurmStepVariables));
    return std::nullopt;
  }
  if (layout_given && !forced) return std::nullopt;
  const SlurmStep step = read_slurm_step(env);
  std::vector<std::string> taken;
  auto take = [&](const std::string& name, const std::string& value, const std::string& from,
                  const std::string& what) {
    if (given_explicitly(g, name)) return;
    g.values[name] = value;
    g.source[name] = from;
    taken.push_back(what);
  };
  take("nnodes", std::to_string(step.nodes), step.nodes_from,
       fmt::format("{} ({})", count_of(step.nodes, "node"), step.nodes_from));
  take("node-rank", std::to_string(step.node_rank), fmt::format("SLURM_NODEID={}", step.node_rank),
       fmt::format("node rank {}", step.node_rank));
  take("master-addr", step.host, step.host_from,
       fmt::format("rendezvous host {} (first of {})", step.host, step.host_from));
  // One node needs no agreed port: its workers get a free one (agent_plan.hpp), so the step's
  // port would be a number the job never uses.
  if (step.nodes > 1)
    take("master-port", std::to_string(step.master_port),
         fmt::format("the port of Slurm step {}", step.job_step),
         fmt::format("MASTER_PORT {} (rendezvous on {})", step.master_port, step.master_port + 1));
  else if (!given_explicitly(g, "master-port"))
    taken.push_back("MASTER_PORT a free port (one node)");
  take("rdzv-id", step.job_step, fmt::format("SLURM_JOB_ID.SLURM_STEP_ID={}", step.job_step),
       fmt::format("run id {}", step.job_step));
  if (step.workers)
    take("nproc-per-node", std::to_string(*step.workers), step.workers_from,
         fmt::format("{} per node ({})", count_of(*step.workers, "worker"), step.workers_from));
  if (taken.empty()) return std::nullopt;
  std::string line = "from Slurm step " + step.job_step + ":";
  for (size_t i = 0; i < taken.size(); ++i) line += (i ? ", " : " ") + taken[i];
  return line;
}

// ---- end of the cluster managers' block --------------------------------------------------------

}  // namespace

std::vector<OptionDoc> option_docs() {
  GivenValues given;
  const std::unique_ptr<CLI::App> app = make_app(given);
  std::vector<OptionDoc> docs;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    OptionDoc doc;
    for (const auto& s : opt->get_snames()) doc.names.push_back("-" + s);
    for (const auto& l : opt->get_lnames()) doc.names.push_back("--" + l);
    doc.takes_value = opt->get_items_expected_max() != 0;
    doc.group = opt->get_group();
    doc.help = opt->get_description();
    doc.default_value = opt->get_default_str();
    doc.summary = doc.help;  // --help, --help-all and --version: CLI11's, already short
    const std::string long_name = opt->get_lnames().empty() ? "" : opt->get_lnames().front();
    const auto& specs = option_specs();
    auto spec = std::find_if(specs.begin(), specs.end(),
                             [&](const OptionSpec& s) { return s.dashed == long_name; });
    if (spec != specs.end()) {
      doc.summary = spec->summary;
      doc.values = spec->values;
      doc.value_list = spec->value_list;
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

namespace {

// CLI11 2.1.2 takes "--opt=" for "--opt" and then the next argument as the value, where argparse
// reads the empty string. No argument of a real command line holds a NUL, so "--opt=" of a
// trainrun option reaches CLI11 as "--opt=\0", and "\0" is read back as "" (in the entrypoint's
// arguments too, which CLI11 leaves as they came).
const std::string kEmptyValue(1, '\0');

std::vector<std::string> mark_empty_values(const std::vector<std::string>& args) {
  std::set<std::string> empty_forms;
  for (const auto& spec : option_specs()) {
    if (spec.is_flag) continue;
    empty_forms.insert("--" + spec.dashed + "=");
    empty_forms.insert("--" + spec.underscored() + "=");
  }
  std::vector<std::string> out = args;
  for (std::string& arg : out)
    if (empty_forms.count(arg)) arg += kEmptyValue;
  return out;
}

// Long options CLI11 adds itself.
const char* const kBuiltinOptions[] = {"help", "help-all", "help_all", "version"};

// Every long spelling ("nproc-per-node", "nproc_per_node", "help") with whether it takes a value.
std::map<std::string, bool> long_spellings() {
  std::map<std::string, bool> out;
  for (const auto& spec : option_specs()) {
    out[spec.dashed] = !spec.is_flag;
    out[spec.underscored()] = !spec.is_flag;
  }
  for (const char* name : kBuiltinOptions) out[name] = false;
  return out;
}

[[noreturn]] void unknown_option(const std::string& arg, const std::string& name,
                                 const std::map<std::string, bool>& spellings) {
  std::vector<std::string> options;
  for (const auto& [spelling, takes_value] : spellings) options.push_back(dashed(spelling));
  const std::string best = closest_word(dashed(name), options);
  if (!best.empty())
    fail(fmt::format("unknown option {}; did you mean --{}? (see trainrun --help)", arg, best));
  fail(fmt::format("unknown option {} (see trainrun --help)", arg));
}

// The newest torchrun's long options (dashed): a prefix that is one of them alone in torchrun keeps
// that meaning here, whatever options trainrun adds ("--no-p" is --no-python, not ambiguous with
// --no-preflight; "--print" is --print-completion, not --print-config).
const std::set<std::string> kTorchrunOptions = {"duplicate-stderr-filters",
                                                "duplicate-stdout-filters",
                                                "event-log-handler",
                                                "help",
                                                "local-addr",
                                                "local-ranks-filter",
                                                "log-dir",
                                                "log-line-prefix-template",
                                                "logs-specs",
                                                "master-addr",
                                                "master-port",
                                                "max-restarts",
                                                "module",
                                                "monitor-interval",
                                                "nnodes",
                                                "no-python",
                                                "node-rank",
                                                "nproc-per-node",
                                                "numa-binding",
                                                "print-completion",
                                                "rdzv-backend",
                                                "rdzv-conf",
                                                "rdzv-endpoint",
                                                "rdzv-id",
                                                "redirects",
                                                "role",
                                                "run-path",
                                                "shutdown-timeout",
                                                "signals-to-handle",
                                                "standalone",
                                                "start-method",
                                                "tee",
                                                "virtual-local-rank"};

// The one torchrun option among `options` (dashed), if exactly one is.
std::optional<std::string> only_torchrun_option(const std::set<std::string>& options) {
  std::optional<std::string> found;
  for (const auto& o : options) {
    if (!kTorchrunOptions.count(o)) continue;
    if (found) return std::nullopt;
    found = o;
  }
  return found;
}

// argparse's allow_abbrev, which torchrun keeps: an unambiguous prefix of a long option stands for
// it. Unlike argparse (3.11), a prefix of both spellings of one option ("--nproc") is not
// ambiguous. Only the options before the entrypoint are read; an unknown one is refused here.
std::vector<std::string> expand_abbreviations(const std::vector<std::string>& args) {
  static const std::map<std::string, bool> spellings = long_spellings();
  static const std::set<std::string> short_with_value = {"-r", "-t", "-x"};
  std::vector<std::string> out = args;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string& arg = out[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') break;
    if (arg[1] != '-') {
      if (short_with_value.count(arg)) ++i;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    auto exact = spellings.find(name);
    if (exact == spellings.end()) {
      std::set<std::string> options;
      std::string spelling;
      for (const auto& [candidate, takes_value] : spellings)
        if (candidate.rfind(name, 0) == 0 && options.insert(dashed(candidate)).second)
          spelling = candidate;
      if (options.empty()) unknown_option(arg, name, spellings);
      if (options.size() > 1) {
        if (const auto torchrun_option = only_torchrun_option(options)) {
          options = {*torchrun_option};
          for (const auto& [candidate, takes_value] : spellings)
            if (candidate.rfind(name, 0) == 0 && dashed(candidate) == *torchrun_option)
              spelling = candidate;
        }
      }
      if (options.size() > 1) {
        std::string listed;
        for (const auto& o : options) listed += (listed.empty() ? "--" : ", --") + o;
        fail(fmt::format("ambiguous option {}: could be {} (see trainrun --help)", arg, listed));
      }
      exact = spellings.find(spelling);
      out[i] = "--" + spelling + (eq == std::string::npos ? "" : arg.substr(eq));
    }
    if (exact->second && eq == std::string::npos) ++i;  // its value follows
  }
  return out;
}

std::string restore_empty(std::string arg) {
  if (arg.size() >= 2 && arg.back() == '\0' && arg[arg.size() - 2] == '=') arg.pop_back();
  return arg;
}

// ---- Many hosts from one terminal (hosts/): what the launching trainrun needs ----------------

// The launching trainrun's own options: no agent gets them.
const char* const kLauncherOptions[] = {"hosts",   "ssh",     "hostfile", "forward-env",
                                        "include", "exclude", "dedup"};

// The command line's options as every agent gets them: without the launcher's own, nor the worker
// count (each host is given its own).
std::vector<std::string> agent_options(const std::vector<std::string>& options) {
  static const std::map<std::string, bool> spellings = long_spellings();
  std::set<std::string> dropped(std::begin(kLauncherOptions), std::end(kLauncherOptions));
  dropped.insert("nproc-per-node");
  std::vector<std::string> out;
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string& arg = options[i];
    const bool has_next = i + 1 < options.size();
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
      auto it = spellings.find(name);
      const bool value_follows = it != spellings.end() && it->second && eq == std::string::npos;
      if (dropped.count(dashed(name))) {
        i += value_follows && has_next ? 1 : 0;
        continue;
      }
      out.push_back(arg);
      if (value_follows && has_next) out.push_back(options[++i]);
    } else if (arg.rfind("-x", 0) == 0) {
      i += arg == "-x" && has_next ? 1 : 0;
    } else {
      out.push_back(arg);
      if ((arg == "-r" || arg == "-t") && has_next) out.push_back(options[++i]);
    }
  }
  return out;
}

bool on_command_line(const GivenValues& g, const std::string& name) {
  return g.options.at(name)->count() > 0;
}

// The settings this machine's environment gave (PET_<NAME>, or a fallback variable such as
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT), as options: a login on another host does not carry them, and
// the launching command governs the whole job as its command line does, over a host's own PET_*.
std::vector<std::string> environment_options(const GivenValues& g,
                                             const std::map<std::string, std::string>& env) {
  std::set<std::string> dropped(std::begin(kLauncherOptions), std::end(kLauncherOptions));
  dropped.insert("nproc-per-node");  // each host is given its own
  std::vector<std::string> out;
  for (const auto& spec : option_specs()) {
    const std::string& name = spec.dashed;
    if (!spec.is_setting() || dropped.count(name) || on_command_line(g, name) ||
        g.from_config.count(name))
      continue;
    if (spec.is_flag) {
      if (env.count(spec.pet_name())) out.push_back("--" + name + (g.flag(name) ? "=1" : "=0"));
    } else if (g.named(name).rfind("--", 0) != 0) {
      out.push_back("--" + name + "=" + g.value(name));
    }
  }
  return out;
}

std::optional<HostsOptions> read_hosts(const GivenValues& g,
                                       const std::map<std::string, std::string>& env,
                                       const std::vector<std::string>& options,
                                       const std::vector<std::string>& rest,
                                       const LaunchConfig& c) {
  const bool listed = !g.value("hosts").empty(), file = !g.value("hostfile").empty();
  if (!listed && !file) {
    for (const char* name : {"hosts", "hostfile"})
      if (given_explicitly(g, name) && g.value(name).empty())
        fail(fmt::format("{}: empty; give the hosts to run on (e.g. --hosts=node0:4,node1:4)",
                         g.named(name)));
    for (const char* name : {"include", "exclude", "forward-env", "dedup"})
      if (on_command_line(g, name))
        fail(fmt::format("{}{} applies only to a job started with --hosts or --hostfile",
                         std::string(name) == "forward-env" ? "-x/--" : "--", name));
    return std::nullopt;
  }
  const std::string named = listed ? g.named("hosts") : g.named("hostfile");
  if (listed && file) fail("--hosts and --hostfile cannot be used together: give one of them");
  if (in_slurm_step(env) || g.flag("slurm"))
    fail(
        fmt::format("{}: inside a Slurm job step srun starts the agents; run trainrun under "
                    "srun without --hosts",
                    named));
  if (g.flag("standalone"))
    fail(fmt::format("{}: --standalone runs one node here; drop one of them", named));
  for (const char* name : {"node-rank", "nnodes", "rdzv-backend", "rdzv-endpoint"})
    if (given_explicitly(g, name))
      fail(
          fmt::format("{}: --hosts gives every host its node rank (the list's order) and the "
                      "rendezvous (the first host); drop {}",
                      g.named(name), g.named(name)));
  if (c.rdzv_conf.token.file)
    fail(
        fmt::format("{}: a --hosts job gets a fresh token from trainrun, handed to each agent "
                    "over ssh; drop token_file",
                    g.named("rdzv-conf")));
  HostsOptions h;
  h.hosts = g.value("hosts");
  h.hostfile = g.value("hostfile");
  if (listed) parse_host_option(h.hosts, named);  // the host file is read when the job starts
  h.include = g.value("include");
  h.exclude = g.value("exclude");
  h.ssh.clear();
  for (const std::string& word : split(g.value("ssh"), ' '))
    if (!trim(word).empty()) h.ssh.push_back(trim(word));
  if (h.ssh.empty())
    fail(fmt::format("{}: names no command; leave it out for ssh", g.named("ssh")));
  // The values given one by one are joined by newlines: one that holds a newline itself would
  // come apart into two names.
  for (const std::string& given : g.options.at("forward-env")->results())
    if (given.find('\n') != std::string::npos)
      fail(
          fmt::format("-x {}: a value that holds a newline cannot be forwarded (-x and "
                      ".trainrun_env take one line each); set it on the hosts instead",
                      escape_control(given)));
  for (const std::string& entry : split(g.value("forward-env"), '\n'))
    if (!entry.empty()) h.forward_env.push_back(entry);
  h.dedup = g.flag("dedup");
  h.workers = g.value("nproc-per-node");
  // Given on the command line, in --config or in this machine's environment: every agent gets
  // it, and trainrun's choice for --hosts gives way.
  h.master_addr_given = given_explicitly(g, "master-addr");
  h.output_given = given_explicitly(g, "tee") || given_explicitly(g, "redirects");
  h.prefix_given = given_explicitly(g, "log-line-prefix-template");
  h.shutdown_timeout = c.shutdown_timeout;
  h.agent_options = environment_options(g, env);
  const std::vector<std::string> typed = agent_options(options);
  h.agent_options.insert(h.agent_options.end(), typed.begin(), typed.end());
  h.entry = rest;
  return h;
}

// ---- end of the hosts block --------------------------------------------------------------------

}  // namespace

ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env,
                                const ConfigReader& read_config_text,
                                std::optional<int> terminal_width) {
  GivenValues given;
  const std::unique_ptr<CLI::App> app_ptr = make_app(given);
  CLI::App& app = *app_ptr;

  const std::vector<std::string> expanded = expand_abbreviations(args);
  const std::vector<std::string> marked = mark_empty_values(expanded);
  std::vector<std::string> reversed(marked.rbegin(), marked.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return {LaunchConfig{}, help_text(false, help_width(env, terminal_width)), {}};
  } catch (const CLI::CallForAllHelp&) {
    return {LaunchConfig{},
            help_text(true, help_width(env, terminal_width), manual_line(installed_manual())),
            {}};
  } catch (const CLI::CallForVersion& e) {
    return {LaunchConfig{}, std::string(e.what()) + "\n", {}};
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    fail(fmt::format("{} (see trainrun --help)", msg));
  }
  for (auto& [name, value] : given.values)
    if (value == kEmptyValue) value.clear();
  const bool config_given = given.options.at("config")->count() > 0;
  apply_environment(env, config_given ? read_config(given, read_config_text) : ConfigEntries{},
                    given.value("config"), given);
  // A Slurm step's layout is this node's, read again at each start: not part of --print-config.
  std::optional<std::string> slurm_line;
  if (given.options.at("print-completion")->count() == 0 && !given.flag("print-config"))
    slurm_line = apply_slurm(env, given);
  if (given.options.at("print-completion")->count() > 0)
    return {LaunchConfig{},
            completion_script(given.value("print-completion"),
                              "--print-completion=" + given.value("print-completion")),
            {}};

  // In this order, so that of several bad values the same one is reported first as always.
  LaunchConfig c;
  read_topology(given, c);
  read_rendezvous(given, c);
  read_static_endpoint(given, c);
  read_supervision(given, c);
  read_output(given, c);
  read_signals(given, c);
  read_ignored(given, c);
  read_launcher_output(given, env, c);
  std::vector<std::string> rest = app.remaining();
  std::transform(rest.begin(), rest.end(), rest.begin(), restore_empty);
  if (given.flag("print-config")) return {LaunchConfig{}, print_config(given), {}};
  read_entrypoint(given, rest, env, c);

  if (c.standalone) {
    // torchrun 2.x keeps the count and waits for nodes its own localhost rendezvous never sees.
    if (c.max_nodes != 1)
      fail(fmt::format(
          "{}: --standalone runs one node; for {} drop --standalone and give every node "
          "--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT",
          given.named("nnodes"), count_of(c.max_nodes, "node")));
    c = standalone_job(c);
  }
  // Whether the job made progress is asked of every node through the built-in rendezvous.
  if (c.hang_timeout > 0 && c.max_nodes > 1 && is_etcd(c.rdzv_backend))
    fail(
        fmt::format("{}: a job of several nodes needs the built-in rendezvous (c10d or static) "
                    "to see every node's progress; drop it or use --rdzv-backend=c10d",
                    given.named("hang-timeout")));
  check_rendezvous_layout(c, env);
  ParseOutcome outcome{c, std::nullopt, ignored_option_warnings(given, c)};
  outcome.hosts =
      read_hosts(given, env,
                 std::vector<std::string>(
                     expanded.begin(), expanded.end() - static_cast<std::ptrdiff_t>(rest.size())),
                 rest, c);
  if (slurm_line) outcome.notes.push_back(*slurm_line);
  return outcome;
}

}  // namespace trainrun::launch
