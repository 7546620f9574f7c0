#pragma once

#include <map>
#include <string>

namespace trainrun::runtime {

// What the launcher told this process, read from the variables torchrun and trainrun set.
// Launched mode needs all of RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT; local mode (one process, no process group) needs none of them.
struct LaunchEnv {
  bool launched = false;
  int world_rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;  // GROUP_RANK when set, else RANK / LOCAL_WORLD_SIZE
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id;  // TORCHELASTIC_RUN_ID, empty when not set
  std::string master_addr;
  int master_port = 0;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE, empty when not set
  // TORCHELASTIC_USE_AGENT_STORE=True: the launcher hosts the store and every rank is a client
  // (torchrun 2.x, trainrun for torch 2.x Python workers); otherwise rank 0 hosts it (trainrun
  // for programs that are not Python).
  bool use_agent_store = false;
};

// Parses a process environment. A partial set of the six launcher variables, or a value out of
// range, throws ConfigError naming the variables and what to do. Pure: no global state is read.
LaunchEnv parse_launch_env(const std::map<std::string, std::string>& env);

// The current process's environment as a map, for parse_launch_env.
std::map<std::string, std::string> current_environment();

// The view of the job a training function gets from get_context().
class TrainContext {
 public:
  TrainContext() = default;
  TrainContext(LaunchEnv env, std::string experiment_name, bool use_gpu);

  int world_rank() const { return env_.world_rank; }
  int local_rank() const { return env_.local_rank; }
  int world_size() const { return env_.world_size; }
  int local_world_size() const { return env_.local_world_size; }
  int node_rank() const { return env_.node_rank; }
  int restart_count() const { return env_.restart_count; }
  const std::string& run_id() const { return env_.run_id; }
  const std::string& experiment_name() const { return experiment_name_; }
  // True when started by trainrun/torchrun (even with world size 1): a process group exists.
  bool launched() const { return env_.launched; }
  bool use_gpu() const { return use_gpu_; }
  const LaunchEnv& launch_env() const { return env_; }

 private:
  LaunchEnv env_;
  std::string experiment_name_;
  bool use_gpu_ = false;
};

// The context of the running training function. Outside TorchTrainer::fit() it is built on first
// use from the environment with default settings (and starts the process group when launched).
const TrainContext& get_context();

// Ends the run started by get_context() outside TorchTrainer: waits for every rank (rank 0 hosts
// the store the others use), then tears the process group down. fit() does this by itself.
void shutdown();

}  // namespace trainrun::runtime
