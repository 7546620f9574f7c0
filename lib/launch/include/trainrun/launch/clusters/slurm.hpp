#pragma once

#include <map>
#include <optional>
#include <string>

namespace trainrun::launch {

// What a Slurm job step (srun, one trainrun task per node) tells trainrun about its job, read
// from the task's environment. Each value carries the variable it came from, to name it in the
// line trainrun prints and in errors.
struct SlurmStep {
  std::string job_step;  // "<SLURM_JOB_ID>.<SLURM_STEP_ID>": the rendezvous run id
  int nodes = 1;         // SLURM_STEP_NUM_NODES, else SLURM_NNODES, else SLURM_JOB_NUM_NODES
  std::string nodes_from;
  int node_rank = 0;  // SLURM_NODEID: this node's index in the step
  std::string host;   // the first host of the step's node list: the rendezvous host
  std::string host_from;
  // MASTER_PORT: 10000 + 2 * ((16 * job id + step id) mod 10000), the rendezvous on the next
  // port; both in 10000..29999, under Linux's ephemeral ports, and different for the steps of
  // one job and for neighbouring jobs, which may share a node.
  int master_port = 29500;
  // Workers per node: the GPUs Slurm gave this node (SLURM_GPUS_ON_NODE, else the count of
  // SLURM_STEP_GPUS or SLURM_JOB_GPUS), else the CPUs asked for the trainrun task
  // (SLURM_CPUS_PER_TASK, srun -c); nothing when the step has neither (torchrun's default of 1
  // applies).
  std::optional<int> workers;
  std::string workers_from;
};

// True inside an srun step: SLURM_JOB_ID, SLURM_STEP_ID and SLURM_NODEID are all set (a batch
// script itself has no SLURM_STEP_ID, a login shell none of them).
bool in_slurm_step(const std::map<std::string, std::string>& env);

// Reads the step from `env`. Pure. Throws UsageError with one line naming the variable for a
// missing or malformed one, a node list that is not a Slurm host list or whose length is not the
// node count, a node rank out of range, and a step that runs more than one task on a node
// (SLURM_STEP_TASKS_PER_NODE): trainrun is the one task of its node and starts the workers.
SlurmStep read_slurm_step(const std::map<std::string, std::string>& env);

// The variables that mark a Slurm step, to name them when --slurm is given outside one.
inline constexpr const char* kSlurmStepVariables = "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NODEID";

}  // namespace trainrun::launch
