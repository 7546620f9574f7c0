#include "trainrun/launch/clusters/slurm.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "parse_helpers.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/workers/worker_count.hpp"

using namespace trainrun::launch;
using trainrun::test::outcome;
using Env = std::map<std::string, std::string>;

namespace {

// What srun gives the task on the second node of `srun -N2 --ntasks-per-node=1` in job 1234
// (as Slurm 22.05 sets it; the values not used here left out).
Env step_env() {
  return {{"SLURM_JOB_ID", "1234"},
          {"SLURM_JOBID", "1234"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEPID", "0"},
          {"SLURM_NODEID", "1"},
          {"SLURM_PROCID", "1"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NNODES", "2"},
          {"SLURM_JOB_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NODELIST", "gpu-a[07-08]"},
          {"SLURM_JOB_NODELIST", "gpu-a[07-08]"},
          {"SLURM_STEP_NODELIST", "gpu-a[07-08]"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NTASKS_PER_NODE", "1"},
          {"SLURM_CPUS_ON_NODE", "2"}};
}

Env with(Env env, const Env& changes) {
  for (const auto& [k, v] : changes) {
    if (v == "(unset)")
      env.erase(k);
    else
      env[k] = v;
  }
  return env;
}

std::string error_of(const Env& env) {
  try {
    read_slurm_step(env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("a step is recognised by its job id, step id and node id", "[slurm]") {
  CHECK(in_slurm_step(step_env()));
  // A batch script has no SLURM_STEP_ID; a login shell none of them.
  CHECK_FALSE(in_slurm_step(with(step_env(), {{"SLURM_STEP_ID", "(unset)"}})));
  CHECK_FALSE(in_slurm_step(with(step_env(), {{"SLURM_NODEID", "(unset)"}})));
  CHECK_FALSE(in_slurm_step(with(step_env(), {{"SLURM_JOB_ID", ""}})));
  CHECK_FALSE(in_slurm_step({}));
}

TEST_CASE("the step gives nodes, node rank, host, run id and port", "[slurm]") {
  const SlurmStep s = read_slurm_step(step_env());
  CHECK(s.job_step == "1234.0");
  CHECK(s.nodes == 2);
  CHECK(s.nodes_from == "SLURM_STEP_NUM_NODES=2");
  CHECK(s.node_rank == 1);
  CHECK(s.host == "gpu-a07");
  CHECK(s.host_from == "SLURM_STEP_NODELIST=gpu-a[07-08]");
  CHECK(s.master_port == 10000 + 2 * ((16 * 1234 + 0) % 10000));
  CHECK_FALSE(s.workers.has_value());
}

TEST_CASE("a step on part of the allocation uses the step's nodes", "[slurm]") {
  // srun -N1 -w n2 inside a two-node job.
  const SlurmStep s = read_slurm_step(with(step_env(), {{"SLURM_STEP_NUM_NODES", "1"},
                                                        {"SLURM_NNODES", "1"},
                                                        {"SLURM_NODEID", "0"},
                                                        {"SLURM_STEP_NODELIST", "gpu-a08"},
                                                        {"SLURM_NODELIST", "gpu-a08"},
                                                        {"SLURM_STEP_ID", "3"},
                                                        {"SLURM_STEP_TASKS_PER_NODE", "1"}}));
  CHECK(s.nodes == 1);
  CHECK(s.host == "gpu-a08");
  CHECK(s.job_step == "1234.3");
  // Other steps of the job, and the next job, get other ports.
  CHECK(s.master_port != read_slurm_step(step_env()).master_port);
  CHECK(s.master_port != read_slurm_step(with(step_env(), {{"SLURM_JOB_ID", "1235"}})).master_port);
  CHECK(s.master_port >= 10000);
  CHECK(s.master_port + 1 <= 29999);
}

TEST_CASE("older variables are read where the step's are missing", "[slurm]") {
  const SlurmStep s = read_slurm_step(with(step_env(), {{"SLURM_STEP_NUM_NODES", "(unset)"},
                                                        {"SLURM_STEP_NODELIST", "(unset)"},
                                                        {"SLURM_NODELIST", "(unset)"},
                                                        {"SLURM_NNODES", "(unset)"}}));
  CHECK(s.nodes_from == "SLURM_JOB_NUM_NODES=2");
  CHECK(s.host_from == "SLURM_JOB_NODELIST=gpu-a[07-08]");
}

TEST_CASE("workers per node: the node's GPUs, else the task's CPUs, else none", "[slurm]") {
  auto workers = [](const Env& changes) {
    const SlurmStep s = read_slurm_step(with(step_env(), changes));
    return s.workers ? std::to_string(*s.workers) + " " + s.workers_from : "none";
  };
  CHECK(workers({{"SLURM_GPUS_ON_NODE", "4"}, {"SLURM_CPUS_PER_TASK", "16"}}) ==
        "4 SLURM_GPUS_ON_NODE=4");
  CHECK(workers({{"SLURM_STEP_GPUS", "0,1,2"}}) == "3 SLURM_STEP_GPUS=0,1,2");
  CHECK(workers({{"SLURM_JOB_GPUS", "5,7"}}) == "2 SLURM_JOB_GPUS=5,7");
  CHECK(workers({{"SLURM_GPUS_ON_NODE", "0"}, {"SLURM_CPUS_PER_TASK", "8"}}) ==
        "8 SLURM_CPUS_PER_TASK=8");
  // SLURM_CPUS_ON_NODE alone (no -c) is what Slurm gave the node, not a request for workers.
  CHECK(workers({}) == "none");
}

TEST_CASE("a bad or missing step variable is named in one line", "[slurm]") {
  CHECK(error_of(with(step_env(), {{"SLURM_NODEID", "2"}})) ==
        "SLURM_NODEID=2: expected an integer in 0..1");
  CHECK(error_of(with(step_env(), {{"SLURM_JOB_ID", "12x"}})).rfind("SLURM_JOB_ID=12x: ", 0) == 0);
  CHECK(error_of(with(step_env(), {{"SLURM_STEP_NUM_NODES", "(unset)"},
                                   {"SLURM_NNODES", "(unset)"},
                                   {"SLURM_JOB_NUM_NODES", "(unset)"}})) ==
        "Slurm step without SLURM_STEP_NUM_NODES or SLURM_NNODES or SLURM_JOB_NUM_NODES: cannot "
        "take the job's layout from Slurm");
  CHECK(error_of(with(step_env(), {{"SLURM_STEP_NODELIST", "gpu-a[07-08"}})) ==
        "SLURM_STEP_NODELIST=gpu-a[07-08: not a Slurm host list: '[' without ']'");
  CHECK(error_of(with(step_env(), {{"SLURM_STEP_NODELIST", "gpu-a[07-09]"}})) ==
        "SLURM_STEP_NODELIST=gpu-a[07-09] names 3 hosts, but SLURM_STEP_NUM_NODES=2");
  CHECK(error_of(with(step_env(), {{"SLURM_STEP_NODELIST", "gpu-a07"}})) ==
        "SLURM_STEP_NODELIST=gpu-a07 names 1 host, but SLURM_STEP_NUM_NODES=2");
  CHECK(error_of(with(step_env(), {{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}})) ==
        "SLURM_STEP_TASKS_PER_NODE=2(x2): srun started 2 trainrun tasks on one node; start one "
        "per node (srun --ntasks-per-node=1) and give the workers per node with "
        "--nproc-per-node");
  CHECK(error_of(with(step_env(), {{"SLURM_STEP_TASKS_PER_NODE", "1,x"}})) ==
        "SLURM_STEP_TASKS_PER_NODE=1,x: expected counts like 1(x2),2");
  CHECK(error_of(with(step_env(), {{"SLURM_CPUS_PER_TASK", "0"}})) ==
        "SLURM_CPUS_PER_TASK=0: expected an integer in 1..1048576");
}

TEST_CASE("inside a step with no rendezvous option, the layout comes from Slurm", "[slurm]") {
  const ParseOutcome out = outcome({"train.py"}, with(step_env(), {{"SLURM_GPUS_ON_NODE", "4"}}));
  const LaunchConfig& c = out.config;
  CHECK(c.min_nodes == 2);
  CHECK(c.max_nodes == 2);
  CHECK(c.node_rank == 1);
  CHECK(c.master_addr == "gpu-a07");
  CHECK(c.master_port == read_slurm_step(step_env()).master_port);
  CHECK(c.rdzv_backend == RendezvousBackend::static_);
  CHECK(c.rdzv_id == "1234.0");
  CHECK(c.nproc_per_node.number == 4);
  REQUIRE(out.notes.size() == 1);
  CHECK(out.notes[0] ==
        "from Slurm step 1234.0: 2 nodes (SLURM_STEP_NUM_NODES=2), node rank 1, rendezvous host "
        "gpu-a07 (first of SLURM_STEP_NODELIST=gpu-a[07-08]), MASTER_PORT 29488 (rendezvous on "
        "29489), run id 1234.0, 4 workers per node (SLURM_GPUS_ON_NODE=4)");
}

TEST_CASE("a one-node step's line names the port its workers get: a free one", "[slurm]") {
  const Env one_node = with(step_env(), {{"SLURM_STEP_NUM_NODES", "1"},
                                         {"SLURM_NODEID", "0"},
                                         {"SLURM_STEP_NODELIST", "gpu-a07"},
                                         {"SLURM_STEP_TASKS_PER_NODE", "1"}});
  const ParseOutcome out = outcome({"train.py"}, one_node);
  CHECK_FALSE(out.config.master_port_given);
  REQUIRE(out.notes.size() == 1);
  CHECK(out.notes[0] ==
        "from Slurm step 1234.0: 1 node (SLURM_STEP_NUM_NODES=1), node rank 0, rendezvous host "
        "gpu-a07 (first of SLURM_STEP_NODELIST=gpu-a07), MASTER_PORT a free port (one node), run "
        "id 1234.0");
  // A port given is the one used, and Slurm's line leaves it out.
  const ParseOutcome given = outcome({"--slurm", "--master-port=23456", "train.py"}, one_node);
  CHECK(given.config.master_port == 23456);
  CHECK(given.notes[0].find("MASTER_PORT") == std::string::npos);
}

TEST_CASE("--nproc-per-node and other options that are not the layout keep Slurm on", "[slurm]") {
  const ParseOutcome out =
      outcome({"--nproc-per-node=3", "--max-restarts=2", "train.py"}, step_env());
  CHECK(out.config.nproc_per_node.number == 3);
  CHECK(out.config.node_rank == 1);
  CHECK(out.notes.size() == 1);
  CHECK(out.notes[0].find("workers") == std::string::npos);
}

TEST_CASE("any rendezvous option given turns Slurm off unless --slurm", "[slurm]") {
  for (const char* option : {"--nnodes=2", "--node-rank=1", "--master-addr=h", "--master-port=1234",
                             "--rdzv-endpoint=h:1", "--rdzv-id=x", "--standalone"}) {
    const ParseOutcome out = outcome({option, "train.py"}, step_env());
    CHECK(out.notes.empty());
  }
  // The c10d backend needs its endpoint to be a job at all.
  CHECK(outcome({"--rdzv-backend=c10d", "--rdzv-endpoint=h:1", "train.py"}, step_env())
            .notes.empty());
  // PET_* counts as given, as on Kubernetes.
  CHECK(outcome({"train.py"}, with(step_env(), {{"PET_NNODES", "2"}})).notes.empty());
  CHECK(outcome({"train.py"}, with(step_env(), {{"PET_NNODES", "2"}})).config.node_rank == 0);
}

TEST_CASE("--slurm combines: explicit options win, Slurm gives the rest", "[slurm]") {
  const ParseOutcome out = outcome({"--slurm", "--master-port=40000", "train.py"}, step_env());
  CHECK(out.config.master_port == 40000);
  CHECK(out.config.master_port_given);
  CHECK(out.config.master_addr == "gpu-a07");
  CHECK(out.config.node_rank == 1);
  REQUIRE(out.notes.size() == 1);
  CHECK(out.notes[0].find("MASTER_PORT") == std::string::npos);
  CHECK(outcome({"--slurm", "--node-rank=0", "x"}, step_env()).config.node_rank == 0);
  CHECK(outcome({"x"}, with(step_env(), {{"PET_SLURM", "1"}, {"PET_NNODES", "2"}}))
            .config.node_rank == 1);
}

TEST_CASE("--slurm outside a step is refused in one line", "[slurm]") {
  CHECK_THROWS_WITH(outcome({"--slurm", "train.py"}, {}),
                    "--slurm: not inside a Slurm job step (SLURM_JOB_ID, SLURM_STEP_ID, "
                    "SLURM_NODEID unset); start trainrun with srun --ntasks-per-node=1");
  CHECK_THROWS_WITH(outcome({"train.py"}, with(step_env(), {{"SLURM_STEP_NODELIST", "a[]"}})),
                    "SLURM_STEP_NODELIST=a[]: not a Slurm host list: empty brackets []");
}

TEST_CASE("outside a step nothing changes", "[slurm]") {
  const ParseOutcome out = outcome({"train.py"}, with(step_env(), {{"SLURM_STEP_ID", "(unset)"}}));
  CHECK(out.notes.empty());
  CHECK(out.config.master_addr == "127.0.0.1");
  CHECK(out.config.node_rank == 0);
}

TEST_CASE("a step that asks for more workers than a node can run is refused", "[slurm]") {
  for (const auto& [name, value] :
       Env{{"SLURM_GPUS_ON_NODE", "1000000"}, {"SLURM_CPUS_PER_TASK", "100000"}}) {
    CHECK_THROWS_WITH(
        check_worker_limits(outcome({"train.py"}, with(step_env(), {{name, value}})).config,
                            ProcessLimits{}),
        Catch::StartsWith(name + "=" + value + ": more workers than one node can run: at most"));
  }
}
