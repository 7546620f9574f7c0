#include "trainrun/launch/clusters/slurm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <stdexcept>

#include "trainrun/base/hostlist.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/base/wording.hpp"
#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

namespace {

using Env = std::map<std::string, std::string>;

// One SLURM_* variable as found: its name and value.
struct Variable {
  std::string name, value;
  std::string text() const { return name + "=" + value; }
};

// The first of `names` that is set (and not empty); nothing if none is.
std::optional<Variable> first_set(const Env& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) return Variable{name, it->second};
  }
  return std::nullopt;
}

Variable required(const Env& env, std::initializer_list<const char*> names) {
  if (auto found = first_set(env, names)) return *found;
  std::string list;
  for (const char* name : names) list += (list.empty() ? "" : " or ") + std::string(name);
  throw UsageError(
      fmt::format("Slurm step without {}: cannot take the job's layout from Slurm", list));
}

long long number(const Variable& var, long long low, long long high) {
  const std::optional<long long> n = parse_integer(var.value);
  if (!n || *n < low || *n > high)
    throw UsageError(fmt::format("{}: expected an integer in {}..{}", var.text(), low, high));
  return *n;
}

// SLURM_STEP_TASKS_PER_NODE ("1(x2)", "2,1(x3)"): the most tasks on one node.
int most_tasks_per_node(const Variable& var) {
  const std::string& value = var.value;
  int most = 0;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string item = value.substr(start, comma == std::string::npos ? comma : comma - start);
    const std::optional<long long> n = parse_integer(item.substr(0, item.find('(')));
    if (!n || *n < 0 || *n > 1000000)
      throw UsageError(fmt::format("{}: expected counts like 1(x2),2", var.text()));
    most = std::max(most, static_cast<int>(*n));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return most;
}

// A comma list of GPU indices ("0,1,2,3"): how many.
int count_list(const std::string& value) {
  int n = 1;
  for (char c : value) n += c == ',';
  return n;
}

void read_workers(const Env& env, SlurmStep& step) {
  std::optional<Variable> from;
  if (auto gpus = first_set(env, {"SLURM_GPUS_ON_NODE"}); gpus && number(*gpus, 0, 1 << 20) > 0) {
    step.workers = static_cast<int>(number(*gpus, 0, 1 << 20));
    from = gpus;
  } else if (auto list = first_set(env, {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"})) {
    step.workers = count_list(list->value);
    from = list;
  } else if (auto cpus = first_set(env, {"SLURM_CPUS_PER_TASK"})) {
    step.workers = static_cast<int>(number(*cpus, 1, 1 << 20));
    from = cpus;
  }
  if (from) step.workers_from = from->text();
}

// The step's hosts: the first is the rendezvous host; as many as the step's nodes.
void read_hosts(const Env& env, SlurmStep& step) {
  const Variable list =
      required(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"});
  try {
    const HostList hosts = HostList::parse(list.value);
    if (hosts.size() != static_cast<size_t>(step.nodes))
      throw UsageError(fmt::format("{} names {}, but {}", list.text(),
                                   count_of(static_cast<long long>(hosts.size()), "host"),
                                   step.nodes_from));
    step.host = hosts.first();
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("{}: not a Slurm host list: {}", list.text(), e.what()));
  }
  step.host_from = list.text();
}

// trainrun is the one task of its node, and starts the node's workers itself.
void check_one_task_per_node(const Env& env) {
  const auto tasks = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!tasks) return;
  const int most = most_tasks_per_node(*tasks);
  if (most > 1)
    throw UsageError(
        fmt::format("{}: srun started {} trainrun tasks on one node; start one per node (srun "
                    "--ntasks-per-node=1) and give the workers per node with --nproc-per-node",
                    tasks->text(), most));
}

}  // namespace

bool in_slurm_step(const Env& env) {
  return first_set(env, {"SLURM_JOB_ID"}) && first_set(env, {"SLURM_STEP_ID"}) &&
         first_set(env, {"SLURM_NODEID"});
}

SlurmStep read_slurm_step(const Env& env) {
  SlurmStep step;
  const long long job = number(required(env, {"SLURM_JOB_ID"}), 0, 1LL << 40);
  const long long step_id = number(required(env, {"SLURM_STEP_ID"}), 0, 1LL << 32);
  step.job_step = fmt::format("{}.{}", job, step_id);
  step.master_port = 10000 + static_cast<int>(2 * ((16 * job + step_id) % 10000));

  const Variable nodes =
      required(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  step.nodes = static_cast<int>(number(nodes, 1, 1 << 20));
  step.nodes_from = nodes.text();
  step.node_rank = static_cast<int>(number(required(env, {"SLURM_NODEID"}), 0, step.nodes - 1));
  read_hosts(env, step);
  check_one_task_per_node(env);
  read_workers(env, step);
  return step;
}

}  // namespace trainrun::launch
