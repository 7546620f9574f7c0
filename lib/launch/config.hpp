#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "errors.hpp"
#include "log.hpp"

namespace trainrun::launch {

// Which of a worker's streams go to log files (redirect) or to files and the console (tee).
enum class Std : int { none = 0, out = 1, err = 2, all = 3 };

// A per-local-rank stream selection: one value for all ranks, or an explicit map.
struct StdSpec {
  Std all_ranks = Std::none;
  std::map<int, Std> per_rank;
  bool is_map = false;
  Std for_rank(int local_rank) const;
};

enum class EntryMode { python_script, python_module, executable };

// --nproc-per-node as given: a number, or a word that asks the node how many it can run (cpu,
// gpu, xpu, auto). Parsing keeps the word, so that reading a command line never asks the machine;
// the agent counts when it starts (resolve_worker_count in worker_count.hpp).
struct WorkerCount {
  enum class Kind { number, cpu, gpu, xpu, automatic };
  Kind kind = Kind::number;
  int number = 1;      // the count, when kind is number
  std::string source;  // how it was given ("--nproc-per-node=gpu"), to name it in an error

  WorkerCount() = default;
  // A plain count, as a program that builds its own LaunchConfig gives it.
  WorkerCount(int n) : number(n) {}  // NOLINT(google-explicit-constructor)
};

struct LaunchConfig {
  int min_nodes = 1;
  int max_nodes = 1;
  WorkerCount nproc_per_node;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_given = false;  // explicit --master-port / PET_MASTER_PORT
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::map<std::string, std::string> rdzv_conf;  // checked by check_rdzv_conf
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 0.1;
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  std::string log_dir;  // empty: a fresh temporary directory
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::vector<int>> local_ranks_filter;
  std::string local_addr;
  double shutdown_timeout = 30.0;
  std::vector<int> stop_signals;     // stop the job, forwarded to workers first
  std::vector<int> forward_signals;  // forwarded only (SIGUSR1, SIGUSR2)
  std::string signals_to_handle;     // as given: workers see it in TORCHELASTIC_SIGNALS_TO_HANDLE
  // --log-line-prefix-template, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; none: "[role0]:".
  std::optional<std::string> log_line_prefix_template;
  // Tee'd console lines containing any of these are also written to filtered_std{out,err}.log.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  bool virtual_local_rank = false;         // LOCAL_RANK=0, one GPU per worker
  std::string event_log_handler = "null";  // accepted; trainrun records no elastic events
  std::string numa_binding;                // accepted; trainrun binds nothing

  // trainrun's own output and reporting (not torchrun options).
  Verbosity verbosity = Verbosity::normal;  // -q / -v
  bool log_timestamps = false;              // --log-timestamps, TRAINRUN_LOG_FORMAT=timestamps
  std::string summary_file;                 // --summary-file: JSON job summary at exit

  EntryMode entry_mode = EntryMode::executable;
  std::string python_exec = "python3";  // $PYTHON_EXEC, for scripts and modules
  std::string entrypoint;               // as given on the command line
  std::vector<std::string> entry_args;  // arguments after the entrypoint, untouched

  // The program and arguments each worker runs, before ${local_rank} expansion.
  std::vector<std::string> worker_argv() const;
};

// Parses a command line (argv[0] excluded) with PET_* defaults read from `env`, and inside a
// Slurm step (or with --slurm) the job's layout from its SLURM_* variables (slurm.hpp). Pure: it reads
// nothing else (no file, no other variable, no program), so it is fuzzed and tested as a function.
// Throws UsageError with a one-line reason on bad input. `--help`/`--version` are reported
// through `help_text` (then the returned config is meaningless and main exits 0).
// `warnings` name the options that were accepted but change nothing here; main prints them.
// `notes` say where values came from other than the command line and PET_* (a Slurm step,
// slurm.hpp: one line naming each value taken); main prints them too.
struct ParseOutcome {
  LaunchConfig config;
  std::optional<std::string> help_text;
  std::vector<std::string> warnings;
  std::vector<std::string> notes = {};
};
ParseOutcome parse_command_line(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env);

// Pure parsers, exposed for tests and fuzzing. Each throws UsageError naming `what`.
std::pair<int, int> parse_nnodes(const std::string& value, const std::string& what);
StdSpec parse_std_spec(const std::string& value, const std::string& what);
std::map<std::string, std::string> parse_rdzv_conf(const std::string& value,
                                                   const std::string& what);
std::vector<int> parse_rank_list(const std::string& value, const std::string& what);
int parse_signal_name(const std::string& name, const std::string& what);
// torchrun's --duplicate-std*-filters list: comma-separated, ",," is a literal comma. Empty
// items are dropped: an empty list duplicates nothing.
std::vector<std::string> parse_filter_list(const std::string& value);
// One option as --help shows it, for the man page and the completion scripts (cli_docs.hpp):
// read from the same CLI11 table that parses the command line, so they cannot drift apart.
struct OptionDoc {
  std::vector<std::string> names;  // "-r", "--redirects": short names first
  bool takes_value = false;
  std::string group;
  std::string help;  // as --help prints it, "[env PET_...]" included
  std::string default_value;
};
std::vector<OptionDoc> option_docs();
// The one-line warning for a multi-node job whose rendezvous, master or advertised address is a
// loopback address that other machines cannot reach; empty when there is nothing to say.
std::string loopback_warning(const LaunchConfig& config);

// "${local_rank}" and "$local_rank" become the rank; "$$" becomes "$".
std::string expand_local_rank(const std::string& arg, int local_rank);

}  // namespace trainrun::launch
