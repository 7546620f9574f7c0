#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"
#include "trainrun/launch/workers/supervisor.hpp"
#include "trainrun/launch/workers/worker_env.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What the agent sets up for a job, decided from the configuration alone (pure functions).

// The port this node holds for the workers' store (MASTER_PORT) until worker RANK 0 or the agent's
// store listens on it: 0 for any free port, none when this node cannot be the one to run RANK 0.
std::optional<int> port_to_hold(const LaunchConfig& config, bool use_rendezvous);

// What every worker shares beyond the topology; the rendezvous may change max_restarts.
JobSettings job_settings(const LaunchConfig& config, const std::string& run_id);

// Whether the job's workers get a diagnosis channel (workers/diagnosis.hpp): Python workers of
// torch 2.x (torch 1.x has no flight recorder to read; a program that is not Python is not ours
// to start through a bootstrap), unless --no-diagnosis.
bool wants_diagnosis_channel(const LaunchConfig& config, const JobSettings& job);
bool has_diagnosis_channel(const LaunchConfig& config, const JobSettings& job);

// The line said once at the start of a job whose workers would have had a diagnosis channel but
// for --no-diagnosis: what --hang-timeout and --stacks do without one.
std::string no_diagnosis_line();

// Everything needed to start worker `local_rank` of an attempt whose rank directory is
// `rank_dir`: `program` with the configured arguments (${local_rank} expanded), torchrun's
// environment on top of `inherited`, the output plan and the console prefix (the configured
// template, ${hostname} being `host`). Creates nothing.
WorkerLaunch worker_launch(const LaunchConfig& config, const std::string& program,
                           const Topology& topology, const JobSettings& job, int local_rank,
                           const std::string& rank_dir, const std::string& host,
                           const std::map<std::string, std::string>& inherited);

// The line that opens an attempt: its workers, their ranks and the store's address.
std::string attempt_line(const Topology& topology, int nproc);

// The line that names this node in a multi-node job: its node rank, `host` and the address the
// other nodes reach it by (`advertised`, "?" when unknown).
std::string node_line(const rendezvous::Assignment& assignment, const std::string& host,
                      const std::string& advertised);

// Whether torchrun 2.x would run this command line as --standalone: given, or one node of the
// static backend with neither --master-port nor --rdzv-endpoint (it then runs a c10d rendezvous
// on localhost:0 with a random run id).
bool standalone_in_torchrun(const LaunchConfig& config);

// MASTER_ADDR of a job that only ever has this node, as torchrun 2.x gives it: the static
// master (--master-addr, or --rdzv-endpoint's host) when its port is given; else torchrun's c10d
// one (its one-node default, --standalone, or --rdzv-backend=c10d): --local-addr, else this
// machine's name as Python's socket.getfqdn() gives it (`local_name`, called only then; empty
// where it does not name this machine, and then 127.0.0.1, which workers can reach).
std::string one_node_master_addr(const LaunchConfig& config,
                                 const std::function<std::string()>& local_name);

// The topology of a job without a rendezvous: this node alone, worker RANK 0's store on
// `master_port`, at `one_node_master_addr` (as one_node_master_addr() gives it) when known, else
// at --master-addr.
Topology single_node_topology(const LaunchConfig& config, const std::string& one_node_master_addr,
                              int master_port);

// The topology of the rendezvous' `assignment`; MASTER_ADDR is `one_node_master_addr`, when known,
// for a job that only ever has this node.
Topology assigned_topology(const rendezvous::Assignment& assignment, const LaunchConfig& config,
                           const std::string& one_node_master_addr);

// Why a dynamic job's --node-rank (`preferred`, -1: none) was not given in this round, in one
// line; empty when it was, or none was asked for.
std::string preference_line(const rendezvous::Assignment& assignment, int preferred);

// The worker's TORCHELASTIC_ERROR_FILE in its rank directory.
std::string error_file_in(const std::string& rank_dir);

}  // namespace trainrun::launch
