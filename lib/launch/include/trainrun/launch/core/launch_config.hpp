#pragma once

#include <csignal>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/core/log.hpp"
#include "trainrun/launch/core/rendezvous_conf.hpp"

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

// Where the workers' Python comes from, in this order of precedence (docs/cli.md): PYTHON_EXEC;
// the interpreter the --hosts launcher chose (on the hosts where it exists); the activated
// environment (VIRTUAL_ENV, CONDA_PREFIX); the environment trainrun is installed in; python3 on
// PATH.
enum class PythonSource { variable, launcher, activated, own_environment, path };

// The checks of a multi-node job before its workers start (preflight/): on; warn (a node that
// runs another version or entrypoint is only warned of); off (--no-preflight).
enum class PreflightMode { on, warn, off };

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

// torchrun 2.x's default, which its workers see in TORCHELASTIC_SIGNALS_TO_HANDLE.
inline constexpr char kTorchrunSignalsToHandle[] = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

// A job's whole configuration. The defaults below are the only ones: LaunchConfig{} is the job of
// `trainrun ENTRYPOINT` without options or PET_* variables (torchrun's defaults, one node) less its
// entrypoint, and the option table shows them as its defaults (cli/command_line.cpp).
struct LaunchConfig {
  int min_nodes = 1;
  int max_nodes = 1;
  WorkerCount nproc_per_node;
  int node_rank = 0;
  bool node_rank_given = false;  // explicit --node-rank / PET_NODE_RANK / Slurm's: a dynamic job's
                                 // preference
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_given = false;  // explicit --master-port / PET_MASTER_PORT
  RendezvousBackend rdzv_backend = RendezvousBackend::static_;
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  RendezvousConf rdzv_conf;
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
  double hang_timeout = 0;  // --hang-timeout: seconds without progress before a hang check; 0 off
  // --no-diagnosis: Python workers start without the diagnosis channel, as torchrun starts them.
  bool no_diagnosis = false;
  // --exit-grace: seconds a Python worker whose script is over may take to exit before it is
  // named with its stack and ended (workers with a diagnosis channel); 0 off.
  double exit_grace = 30.0;
  // --signals-to-handle, split: those that stop the job (forwarded to workers first), and those
  // only forwarded (SIGUSR1, SIGUSR2, SIGCONT).
  std::vector<int> stop_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  std::vector<int> forward_signals = {SIGUSR1, SIGUSR2};
  // As given, else torchrun 2.x's default: workers see it in TORCHELASTIC_SIGNALS_TO_HANDLE.
  std::string signals_to_handle = kTorchrunSignalsToHandle;
  // --log-line-prefix-template, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; none: "[role0]:".
  std::optional<std::string> log_line_prefix_template;
  // Tee'd console lines containing any of these are also written to filtered_std{out,err}.log.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  bool virtual_local_rank = false;         // LOCAL_RANK=0, one GPU per worker
  std::string event_log_handler = "null";  // accepted; trainrun records no elastic events
  std::string numa_binding;  // node, socket, exclusive, core-complex (numa_binding.hpp); "" none
  PreflightMode preflight = PreflightMode::on;  // --preflight, --no-preflight
  // --preload: the modules a Python template imports once per node, each worker forked from it
  // (workers/warm_start.hpp); empty: every worker starts its own interpreter.
  std::vector<std::string> preload;

  // trainrun's own output and reporting (not torchrun options).
  Verbosity verbosity = Verbosity::normal;  // -q / -v
  bool log_timestamps = false;              // --log-timestamps, TRAINRUN_LOG_FORMAT=timestamps
  std::string summary_file;                 // --summary-file: JSON job summary at exit

  EntryMode entry_mode = EntryMode::executable;
  std::string python_exec = "python3";              // $PYTHON_EXEC, for scripts and modules
  PythonSource python_source = PythonSource::path;  // where python_exec came from
  std::string entrypoint;                           // as given on the command line
  std::vector<std::string> entry_args;              // arguments after the entrypoint, untouched
};

// `config` as a standalone job (--standalone): one node whose agent runs its own c10d rendezvous
// on a free local port. What the command line and a program that builds its own job both use.
LaunchConfig standalone_job(const LaunchConfig& config);

}  // namespace trainrun::launch
