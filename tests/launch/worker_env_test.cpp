#include "trainrun/launch/workers/worker_env.hpp"

#include <catch2/catch.hpp>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/workers/flight_recorder.hpp"
#include "trainrun/launch/workers/python_torch.hpp"

using namespace trainrun::launch;

TEST_CASE("worker variables follow torchrun") {
  Topology t;
  t.group_rank = 1;
  t.group_world_size = 2;
  t.base_rank = 2;
  t.local_world_size = 3;
  t.world_size = 5;
  t.master_addr = "node0";
  t.master_port = 29501;
  t.restart_count = 2;
  JobSettings job;
  job.role = "trainer";
  job.run_id = "job7";
  job.max_restarts = 3;
  auto v = worker_variables(t, job, 1, "/logs/error.json", {});
  CHECK(v.at("LOCAL_RANK") == "1");
  CHECK(v.at("RANK") == "3");
  CHECK(v.at("GROUP_RANK") == "1");
  CHECK(v.at("ROLE_RANK") == "3");
  CHECK(v.at("ROLE_NAME") == "trainer");
  CHECK(v.at("LOCAL_WORLD_SIZE") == "3");
  CHECK(v.at("WORLD_SIZE") == "5");
  CHECK(v.at("ROLE_WORLD_SIZE") == "5");
  CHECK(v.at("GROUP_WORLD_SIZE") == "2");
  CHECK(v.at("MASTER_ADDR") == "node0");
  CHECK(v.at("MASTER_PORT") == "29501");
  CHECK(v.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(v.at("TORCHELASTIC_MAX_RESTARTS") == "3");
  CHECK(v.at("TORCHELASTIC_RUN_ID") == "job7");
  CHECK(v.at("TORCHELASTIC_USE_AGENT_STORE") == "False");
  CHECK(v.at("TORCHELASTIC_ERROR_FILE") == "/logs/error.json");
  CHECK(v.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  // torch 2.x warns in every process about the old name: only for workers known to run 1.x.
  CHECK(v.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  CHECK(v.at("OMP_NUM_THREADS") == "1");
  CHECK(v.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(v.count("CUDA_VISIBLE_DEVICES") == 0);
  CHECK(v.size() == 19);
}

TEST_CASE("workers known to run torch 1.x also get the old NCCL variable") {
  JobSettings job;
  job.torch = TorchVersion{1, 13};
  auto v = worker_variables({}, job, 0, "e", {});
  CHECK(v.at("NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(v.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  job.torch = TorchVersion{2, 0};
  CHECK(worker_variables({}, job, 0, "e", {}).count("NCCL_ASYNC_ERROR_HANDLING") == 0);
}

TEST_CASE("the torch version a Python interpreter printed") {
  auto is = [](const char* printed, int major, int minor) {
    const auto v = parse_torch_version(printed);
    return v && v->major == major && v->minor == minor;
  };
  CHECK(is("1.13.0a0\n", 1, 13));
  CHECK(is("2.15.0+cu132", 2, 15));
  CHECK(is("2.8.0.dev20250601", 2, 8));
  CHECK(is("3.0", 3, 0));
  CHECK_FALSE(parse_torch_version(""));
  CHECK_FALSE(parse_torch_version("unknown"));
  CHECK_FALSE(parse_torch_version("2"));
  CHECK_FALSE(parse_torch_version("2.x"));
}

TEST_CASE("signals to handle are passed on as given") {
  JobSettings job;
  job.signals_to_handle = "SIGTERM,SIGUSR1";
  CHECK(worker_variables({}, job, 0, "e", {}).at("TORCHELASTIC_SIGNALS_TO_HANDLE") ==
        "SIGTERM,SIGUSR1");
}

TEST_CASE("virtual local rank: LOCAL_RANK 0 and the worker's own GPU") {
  Topology t;
  t.local_world_size = 3;
  t.base_rank = 6;
  JobSettings job;
  job.virtual_local_rank = true;
  auto v = worker_variables(t, job, 2, "e", {});
  CHECK(v.at("LOCAL_RANK") == "0");
  CHECK(v.at("RANK") == "8");
  CHECK(v.at("CUDA_VISIBLE_DEVICES") == "2");
  CHECK(v.count("HIP_VISIBLE_DEVICES") == 0);

  v = worker_variables(t, job, 1, "e", {{"CUDA_VISIBLE_DEVICES", "4, 6,7"}});
  CHECK(v.at("CUDA_VISIBLE_DEVICES") == "6");
  v = worker_variables(t, job, 2, "e",
                       {{"CUDA_VISIBLE_DEVICES", "4,6,7"}, {"HIP_VISIBLE_DEVICES", "1,2,3"}});
  CHECK(v.at("CUDA_VISIBLE_DEVICES") == "3");
  CHECK(v.at("HIP_VISIBLE_DEVICES") == "3");
  // An empty HIP list does not count, as in torchrun.
  v = worker_variables(t, job, 0, "e",
                       {{"CUDA_VISIBLE_DEVICES", "5"}, {"HIP_VISIBLE_DEVICES", ""}});
  CHECK(v.at("CUDA_VISIBLE_DEVICES") == "5");
  CHECK(v.count("HIP_VISIBLE_DEVICES") == 0);

  job.virtual_local_rank = false;
  v = worker_variables(t, job, 2, "e", {{"CUDA_VISIBLE_DEVICES", "4,6,7"}});
  CHECK(v.at("LOCAL_RANK") == "2");
  CHECK(v.count("CUDA_VISIBLE_DEVICES") == 0);  // inherited unchanged
}

TEST_CASE("virtual local rank needs a GPU per worker in the visible list") {
  CHECK_NOTHROW(check_virtual_local_rank(8, {}));
  CHECK_NOTHROW(check_virtual_local_rank(2, {{"CUDA_VISIBLE_DEVICES", "0,1"}}));
  CHECK_THROWS_WITH(check_virtual_local_rank(3, {{"CUDA_VISIBLE_DEVICES", "0,1"}}),
                    "--virtual-local-rank: 3 workers per node but CUDA_VISIBLE_DEVICES=0,1 lists "
                    "2 GPUs; give each worker one, or lower --nproc-per-node");
  CHECK_THROWS_AS(check_virtual_local_rank(2, {{"HIP_VISIBLE_DEVICES", "0"}}), UsageError);
  CHECK_THROWS_AS(check_virtual_local_rank(1, {{"CUDA_VISIBLE_DEVICES", ""}}), UsageError);
}

TEST_CASE("the user's own settings are left alone") {
  Topology t;
  t.local_world_size = 4;
  JobSettings torch1;
  torch1.torch = TorchVersion{1, 13};
  auto v = worker_variables(t, torch1, 0, "e",
                            {{"OMP_NUM_THREADS", "8"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}});
  CHECK(v.count("OMP_NUM_THREADS") == 0);
  CHECK(v.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  t.local_world_size = 1;
  CHECK(worker_variables(t, {}, 0, "e", {}).count("OMP_NUM_THREADS") == 0);
  auto env = merge_environment({{"PATH", "/bin"}, {"RANK", "old"}}, {{"RANK", "4"}});
  CHECK(env == std::vector<std::string>{"PATH=/bin", "RANK=4"});
}

TEST_CASE("the rendezvous token is not passed on to workers", "[launch]") {
  auto env =
      merge_environment({{"PATH", "/bin"}, {"TRAINRUN_RDZV_TOKEN", "s3cret"}}, {{"RANK", "0"}});
  CHECK(env == std::vector<std::string>{"PATH=/bin", "RANK=0"});
}

TEST_CASE("Python workers get no PYTHONFAULTHANDLER: faulthandler is on their command line",
          "[launch]") {
  Topology t;
  JobSettings python;
  python.python_workers = true;
  CHECK(worker_variables(t, python, 0, "e", {}).count("PYTHONFAULTHANDLER") == 0);
  CHECK(runs_python("/usr/bin/python3.11"));
  CHECK(runs_python("python"));
  CHECK_FALSE(runs_python("/opt/python/bin/train"));
}

TEST_CASE("the flight recorder's variables are set when the workers may use NCCL") {
  Topology t;
  JobSettings job;
  const std::string error_file = "/logs/run/attempt_0/0/error.json";
  auto without = worker_variables(t, job, 0, error_file, {});
  CHECK_FALSE(without.count("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
  CHECK_FALSE(without.count("TORCH_NCCL_TRACE_BUFFER_SIZE"));
  job.may_use_nccl = true;
  auto with = worker_variables(t, job, 0, error_file, {});
  CHECK(with.at("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == "/logs/run/attempt_0/0/nccl_trace_rank_");
  CHECK(with.at("TORCH_NCCL_TRACE_BUFFER_SIZE") == "2000");
  CHECK(with.at("TORCH_NCCL_DUMP_ON_TIMEOUT") == "1");
  // The user's settings, under either name, are left alone.
  auto user = worker_variables(
      t, job, 0, error_file,
      {{"TORCH_FR_DUMP_TEMP_FILE", "/mine/"}, {"TORCH_NCCL_TRACE_BUFFER_SIZE", "0"}});
  CHECK_FALSE(user.count("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
  CHECK_FALSE(user.count("TORCH_NCCL_TRACE_BUFFER_SIZE"));
  CHECK(user.at("TORCH_NCCL_DUMP_ON_TIMEOUT") == "1");
  // PyTorch 2.8 and later read the TORCH_FR_ names and warn about the others.
  job.torch = TorchVersion{2, 7};
  CHECK(worker_variables(t, job, 0, error_file, {}) == with);
  job.torch = TorchVersion{2, 11};
  auto newer = worker_variables(t, job, 0, error_file, {});
  CHECK(newer.at("TORCH_FR_DUMP_TEMP_FILE") == "/logs/run/attempt_0/0/nccl_trace_rank_");
  CHECK(newer.at("TORCH_FR_BUFFER_SIZE") == "2000");
  CHECK(newer.at("TORCH_FR_DUMP_ON_TIMEOUT") == "1");
  for (const char* old : {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                          "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})
    CHECK(newer.count(old) == 0);
  user = worker_variables(t, job, 0, error_file, {{"TORCH_NCCL_TRACE_BUFFER_SIZE", "0"}});
  CHECK(user.count("TORCH_FR_BUFFER_SIZE") == 0);
  job.torch = TorchVersion{3, 0};
  CHECK(worker_variables(t, job, 0, error_file, {}).count("TORCH_FR_BUFFER_SIZE") == 1);
}

TEST_CASE("torch 2.x workers without NCCL get the flight recorder's buffer, not its dumps") {
  Topology t;
  JobSettings job;
  const std::string error_file = "/logs/run/attempt_0/0/error.json";
  job.torch = TorchVersion{1, 13};
  CHECK(worker_variables(t, job, 0, error_file, {}).count("NCCL_ASYNC_ERROR_HANDLING") == 1);
  CHECK(worker_variables(t, job, 0, error_file, {}).count("TORCH_NCCL_TRACE_BUFFER_SIZE") == 0);
  job.torch = TorchVersion{2, 15};
  auto gloo = worker_variables(t, job, 0, error_file, {});
  CHECK(gloo.at("TORCH_FR_BUFFER_SIZE") == "2000");
  CHECK(gloo.count("TORCH_FR_DUMP_ON_TIMEOUT") == 0);
  CHECK(gloo.count("TORCH_FR_DUMP_TEMP_FILE") == 0);
  // 0 keeps it off: the user's setting, under either name, is left alone.
  CHECK(worker_variables(t, job, 0, error_file, {{"TORCH_FR_BUFFER_SIZE", "0"}})
            .count("TORCH_FR_BUFFER_SIZE") == 0);
  job.torch = TorchVersion{2, 4};
  CHECK(worker_variables(t, job, 0, error_file, {}).at("TORCH_NCCL_TRACE_BUFFER_SIZE") == "2000");
}

TEST_CASE("flight recorder dumps are named in one line") {
  CHECK(flight_recorder_line({}).empty());
  CHECK(flight_recorder_line({"/a/nccl_trace_rank_0", "/b/nccl_trace_rank_1"}) ==
        "NCCL flight recorder dumps (2): /a/nccl_trace_rank_0, /b/nccl_trace_rank_1");
}

TEST_CASE("every variable that differs between ranks or attempts is a rank variable") {
  // Two workers of different attempts, nodes and job sizes: what a process shared by every worker
  // of every attempt (the --preload template) is given must hold none of what differs.
  Topology a{0, 2, 0, 2, 4, "node0", 29500, 0};
  Topology b{1, 3, 2, 2, 6, "node1", 29600, 1};
  JobSettings job;
  job.may_use_nccl = true;
  job.virtual_local_rank = true;
  const std::map<std::string, std::string> inherited = {{"CUDA_VISIBLE_DEVICES", "4,5"}};
  const auto first = worker_variables(a, job, 0, "/logs/attempt_0/0/error.json", inherited);
  const auto second = worker_variables(b, job, 1, "/logs/attempt_1/1/error.json", inherited);
  REQUIRE(first.size() == second.size());
  for (const auto& [name, value] : first)
    if (second.at(name) != value) CHECK(rank_variables().count(name) == 1);
  CHECK(rank_variables().count("RANK") == 1);
  CHECK(rank_variables().count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("the shared environment holds what every worker holds alike, no rank variable") {
  const std::vector<std::vector<std::string>> envps = {
      {"A=1", "B=2", "OMP_NUM_THREADS=1", "RANK=0", "WORLD_SIZE=2"},
      {"A=1", "B=3", "OMP_NUM_THREADS=1", "RANK=1", "WORLD_SIZE=2"}};
  CHECK(shared_environment(envps) == std::vector<std::string>{"A=1", "OMP_NUM_THREADS=1"});
  // One worker alone still shares no rank variable.
  CHECK(shared_environment({envps[0]}) ==
        std::vector<std::string>{"A=1", "B=2", "OMP_NUM_THREADS=1"});
  CHECK(shared_environment({}).empty());
}
