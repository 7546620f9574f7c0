#include <catch2/catch.hpp>

#include "worker_env.hpp"

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
  CHECK(v.at("NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(v.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(v.at("OMP_NUM_THREADS") == "1");
  CHECK(v.size() == 19);
}

TEST_CASE("the user's own settings are left alone") {
  Topology t;
  t.local_world_size = 4;
  auto v = worker_variables(t, {}, 0, "e", {{"OMP_NUM_THREADS", "8"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}});
  CHECK(v.count("OMP_NUM_THREADS") == 0);
  CHECK(v.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  t.local_world_size = 1;
  CHECK(worker_variables(t, {}, 0, "e", {}).count("OMP_NUM_THREADS") == 0);
  auto env = merge_environment({{"PATH", "/bin"}, {"RANK", "old"}}, {{"RANK", "4"}});
  CHECK(env == std::vector<std::string>{"PATH=/bin", "RANK=4"});
}
