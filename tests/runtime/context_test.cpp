#include <catch2/catch.hpp>
#include <string>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <trainrun/runtime/run_storage.hpp>

namespace rt = trainrun::runtime;
using Env = std::map<std::string, std::string>;

namespace {

Env launched_env() {
  return {{"RANK", "5"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"}};
}

std::string error_of(const Env& env) {
  try {
    rt::parse_launch_env(env);
  } catch (const rt::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("no launcher variables is local mode, world 1") {
  const auto launch = rt::parse_launch_env({{"HOME", "/root"}, {"TORCHELASTIC_ERROR_FILE", "/e"}});
  CHECK_FALSE(launch.launched);
  CHECK(launch.world_size == 1);
  CHECK(launch.world_rank == 0);
  CHECK(launch.local_world_size == 1);
  CHECK(launch.error_file == "/e");
}

TEST_CASE("all six variables give the launched topology") {
  auto env = launched_env();
  env["TORCHELASTIC_RESTART_COUNT"] = "2";
  env["TORCHELASTIC_RUN_ID"] = "job7";
  const auto launch = rt::parse_launch_env(env);
  CHECK(launch.launched);
  CHECK(launch.world_rank == 5);
  CHECK(launch.local_rank == 1);
  CHECK(launch.world_size == 8);
  CHECK(launch.local_world_size == 4);
  CHECK(launch.node_rank == 1);  // RANK / LOCAL_WORLD_SIZE
  CHECK(launch.restart_count == 2);
  CHECK(launch.run_id == "job7");
  CHECK(launch.master_addr == "node0");
  CHECK(launch.master_port == 29500);

  const rt::TrainContext context(launch, "exp", false);
  CHECK(context.world_rank() == 5);
  CHECK(context.node_rank() == 1);
  CHECK(context.experiment_name() == "exp");
  CHECK(context.run_id() == "job7");
}

TEST_CASE("GROUP_RANK, when given, is the node rank") {
  auto env = launched_env();
  env["GROUP_RANK"] = "3";
  CHECK(rt::parse_launch_env(env).node_rank == 3);
}

TEST_CASE("a partial launcher environment names every missing variable") {
  auto env = launched_env();
  env.erase("LOCAL_RANK");
  env.erase("MASTER_PORT");
  const std::string message = error_of(env);
  CHECK_THAT(message, Catch::Contains("LOCAL_RANK, MASTER_PORT not set"));
  CHECK_THAT(message, Catch::Contains("trainrun or torchrun"));
  CHECK_THAT(error_of({{"RANK", "0"}}), Catch::Contains("LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, "
                                                        "MASTER_ADDR, MASTER_PORT not set"));
}

TEST_CASE("out-of-range or malformed values are rejected with the variable and the rule") {
  auto with = [](const std::string& name, const std::string& value) {
    auto env = launched_env();
    env[name] = value;
    return error_of(env);
  };
  CHECK_THAT(with("RANK", "8"), Catch::Contains("RANK=8 is not an integer in [0, 7]"));
  CHECK_THAT(with("RANK", "-1"), Catch::Contains("RANK=-1"));
  CHECK_THAT(with("WORLD_SIZE", "0"), Catch::Contains("WORLD_SIZE=0"));
  CHECK_THAT(with("WORLD_SIZE", "eight"), Catch::Contains("WORLD_SIZE=eight"));
  CHECK_THAT(with("LOCAL_WORLD_SIZE", "9"), Catch::Contains("LOCAL_WORLD_SIZE=9"));
  CHECK_THAT(with("LOCAL_RANK", "4"), Catch::Contains("LOCAL_RANK=4"));
  CHECK_THAT(with("MASTER_PORT", "70000"), Catch::Contains("MASTER_PORT=70000"));
  CHECK_THAT(with("MASTER_PORT", "12x"), Catch::Contains("MASTER_PORT=12x"));
  CHECK_THAT(with("MASTER_ADDR", ""), Catch::Contains("MASTER_ADDR is empty"));
  CHECK_THAT(with("TORCHELASTIC_RESTART_COUNT", "-2"),
             Catch::Contains("TORCHELASTIC_RESTART_COUNT=-2"));
  CHECK_THAT(with("RANK", "99999999999999999999"), Catch::Contains("RANK=9999"));
}

TEST_CASE("experiment names are stable for a launched job and unique for local runs") {
  const rt::RunConfig defaults;
  auto launch = rt::parse_launch_env(launched_env());
  launch.run_id = "3f2a-uuid";
  const std::time_t now = 1764468103;
  CHECK(rt::resolve_experiment_name(defaults, launch, {}, "train", now) == "train_3f2a-uuid");
  CHECK(rt::resolve_experiment_name(defaults, launch, {}, "train", now + 100) == "train_3f2a-uuid");
  launch.run_id = "none";
  CHECK(rt::resolve_experiment_name(defaults, launch, {}, "train", now) == "train_node0_29500");
  // A dynamic rendezvous without a run id: the launcher's log directory, which restarts keep.
  launch.error_file = "/tmp/torchelastic_x/none_k2j3/attempt_1/0/error.json";
  CHECK(rt::resolve_experiment_name(defaults, launch, {}, "train", now) == "train_none_k2j3");
  launch.use_agent_store = true;  // static: the master's address and port stay
  CHECK(rt::resolve_experiment_name(defaults, launch, {}, "train", now) == "train_node0_29500");
  launch.use_agent_store = false;
  launch.run_id = "a/b c";
  CHECK(rt::resolve_experiment_name(defaults, launch, {}, "train", now) == "train_a_b_c");

  const rt::LaunchEnv local;
  const auto first = rt::resolve_experiment_name(defaults, local, {}, "train", now);
  const auto later = rt::resolve_experiment_name(defaults, local, {}, "train", now + 1);
  CHECK(first.rfind("train_", 0) == 0);
  CHECK(first != later);
  // Two runs started in the same second by different processes get different directories.
  CHECK(rt::resolve_experiment_name(defaults, local, {}, "train", now, 100) !=
        rt::resolve_experiment_name(defaults, local, {}, "train", now, 101));

  CHECK(rt::resolve_experiment_name(defaults, local, {{"TRAINRUN_EXPERIMENT_NAME", "e1"}}, "t",
                                    now) == "e1");
  rt::RunConfig named;
  named.name = "mine";
  CHECK(rt::resolve_experiment_name(named, local, {{"TRAINRUN_EXPERIMENT_NAME", "e1"}}, "t", now) ==
        "mine");
  named.name = "../escape";
  CHECK_THROWS_AS(rt::resolve_experiment_name(named, local, {}, "t", now), rt::ConfigError);
}

TEST_CASE("storage path: config, then TRAINRUN_STORAGE_PATH, then ~/trainrun_results") {
  rt::RunConfig config;
  CHECK(rt::resolve_storage_path(config, {{"HOME", "/home/u"}}) == "/home/u/trainrun_results");
  CHECK(rt::resolve_storage_path(config, {{"HOME", "/home/u"}, {"TRAINRUN_STORAGE_PATH", "/s"}}) ==
        "/s");
  config.storage_path = "/explicit";
  CHECK(rt::resolve_storage_path(config, {{"TRAINRUN_STORAGE_PATH", "/s"}}) == "/explicit");
  CHECK_THROWS_AS(rt::resolve_storage_path(rt::RunConfig{}, {}), rt::ConfigError);
}

TEST_CASE("the GPU a rank uses: the only one it sees, else LOCAL_RANK, else the first", "[gpu]") {
  // One GPU visible per process (CUDA_VISIBLE_DEVICES set per worker by Slurm, Kubernetes or
  // --virtual-local-rank): device 0 whatever LOCAL_RANK says.
  REQUIRE(rt::choose_gpu(true, 3, 1) == 0);
  REQUIRE(rt::choose_gpu(true, 0, 1) == 0);
  // Every GPU of the node visible: one per local rank, as with torchrun.
  REQUIRE(rt::choose_gpu(true, 2, 4) == 2);
  REQUIRE(rt::choose_gpu(true, 0, 8) == 0);
  // Local mode: the first GPU. (REQUIRE: LibTorch's logging headers redefine CHECK.)
  REQUIRE(rt::choose_gpu(false, 0, 4) == 0);
  // More ranks than GPUs: LOCAL_RANK, which prepare_device refuses with one line.
  REQUIRE(rt::choose_gpu(true, 5, 4) == 5);
}
