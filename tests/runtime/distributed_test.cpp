// Multi-process tests: real worker processes (runtime_test_worker) with the launcher variables
// set, talking through a real c10d TCPStore and Gloo.
#include <catch2/catch.hpp>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>

#include "worker_processes.hpp"

namespace fs = std::filesystem;
using trainrun::runtime::testing::make_temp_dir;
using trainrun::runtime::testing::metric_lines;
using trainrun::runtime::testing::read_file;
using trainrun::runtime::testing::run_workers;
using trainrun::runtime::testing::WorkerRun;

namespace {

const std::string kWorker = TRAINRUN_RUNTIME_TEST_WORKER;

std::string describe(const WorkerRun& run) {
  std::string text;
  for (std::size_t r = 0; r < run.outputs.size(); ++r) {
    text += "rank " + std::to_string(r) + " exit " + std::to_string(run.exit_codes[r]) + ":\n" +
            run.outputs[r] + "\n";
  }
  return text;
}

void require_success(const WorkerRun& run) {
  INFO(describe(run));
  REQUIRE_FALSE(run.timed_out);
  for (int code : run.exit_codes) REQUIRE(code == 0);
}

// The whitespace-separated values of a file the worker wrote.
template <typename T>
std::vector<T> read_values(const fs::path& path) {
  std::ifstream in(path);
  std::vector<T> values;
  T value{};
  while (in >> value) values.push_back(value);
  return values;
}

std::vector<double> read_numbers(const fs::path& path) { return read_values<double>(path); }
std::vector<long> read_indices(const fs::path& path) { return read_values<long>(path); }

}  // namespace

TEST_CASE("the process group all-reduces across 1, 2 and 4 ranks") {
  for (int world : {1, 2, 4}) {
    const auto run = run_workers(kWorker, {"collectives"}, world);
    require_success(run);
    const std::string expected = "sum=" + std::to_string(world * (world + 1) / 2) + " ";
    for (int r = 0; r < world; ++r) {
      CHECK_THAT(run.outputs[static_cast<std::size_t>(r)],
                 Catch::Contains("rank " + std::to_string(r) + "/" + std::to_string(world)) &&
                     Catch::Contains(expected) && Catch::Contains("ok"));
    }
  }
  const auto local = run_workers(kWorker, {"collectives"}, 0);
  require_success(local);
  CHECK_THAT(local.outputs[0], Catch::Contains("no process group (local mode)"));
}

TEST_CASE("GLOO_SOCKET_IFNAME takes a comma-separated list of interfaces, as Gloo does") {
  const auto run = run_workers(kWorker, {"collectives"}, 2, {{"GLOO_SOCKET_IFNAME", "lo,lo"}});
  require_success(run);
  CHECK_THAT(run.outputs[1], Catch::Contains("sum=3 ") && Catch::Contains("ok"));
}

TEST_CASE("a partial launcher environment fails with the missing names") {
  const auto run = run_workers(kWorker, {"collectives"}, 0, {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  CHECK(run.exit_codes[0] == 5);
  CHECK_THAT(run.outputs[0],
             Catch::Contains("LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set"));
}

// Trains `variant` in local mode and on each of `worlds`, and checks every rank ends with the
// parameters of the one-process run on the full batch.
// Returns the outputs of the runs on each world, rank by rank.
std::vector<std::string> check_matches_one_process(const std::string& variant,
                                                   std::initializer_list<int> worlds) {
  const fs::path out = make_temp_dir("mlp_" + variant);
  fs::create_directories(out / "local");
  require_success(run_workers(kWorker, {"mlp", (out / "local").string(), "5", variant}, 0));
  const auto reference = read_numbers(out / "local" / "params_rank0.txt");
  REQUIRE(reference.size() > 0);

  // Training must change the parameters, or equality below would prove nothing.
  fs::create_directories(out / "untrained");
  require_success(run_workers(kWorker, {"mlp", (out / "untrained").string(), "0", variant}, 0));
  const auto initial = read_numbers(out / "untrained" / "params_rank0.txt");
  REQUIRE(initial.size() == reference.size());
  double moved = 0;
  for (std::size_t i = 0; i < initial.size(); ++i) moved += std::abs(initial[i] - reference[i]);
  CHECK(moved > 1e-2);

  std::vector<std::string> outputs;
  for (int world : worlds) {
    const fs::path dir = out / ("world" + std::to_string(world));
    fs::create_directories(dir);
    const auto run = run_workers(kWorker, {"mlp", dir.string(), "5", variant}, world);
    require_success(run);
    outputs.insert(outputs.end(), run.outputs.begin(), run.outputs.end());
    for (int r = 0; r < world; ++r) {
      const auto params = read_numbers(dir / ("params_rank" + std::to_string(r) + ".txt"));
      REQUIRE(params.size() == reference.size());
      double worst = 0;
      for (std::size_t i = 0; i < params.size(); ++i) {
        worst = std::max(worst, std::abs(params[i] - reference[i]));
      }
      INFO(variant << ": world " << world << " rank " << r);
      CHECK(worst < 1e-5);
    }
  }
  return outputs;
}

TEST_CASE("prepare_model: data-parallel SGD equals one process on the full batch") {
  SECTION("one backward pass per step, 2 and 4 ranks") {
    check_matches_one_process("plain", {2, 4});
  }
  SECTION("gradient accumulation: two backward passes per step") {
    check_matches_one_process("accumulate", {2});
  }
  SECTION("NoSync: the first of two passes stays local, the second averages both") {
    for (const auto& output : check_matches_one_process("no_sync", {2})) {
      CHECK_THAT(output,
                 Catch::Contains("gradients after a local or no_sync pass differ across ranks"));
    }
  }
  SECTION("several buckets and a parameter forward never uses") {
    check_matches_one_process("wide", {2});
  }
  SECTION("a backward that throws leaves synchronisation and NoSync working") {
    for (const auto& output : check_matches_one_process("throw", {2})) {
      CHECK_THAT(output, Catch::Contains("backward threw: ") &&
                             Catch::Contains(
                                 "gradients after a local or no_sync pass differ across ranks"));
    }
  }
  SECTION("prepare_model twice on one model is harmless") {
    check_matches_one_process("prepare_twice", {2});
  }
  SECTION("loading a state dict after prepare_model keeps gradients synchronised") {
    for (const auto& output : check_matches_one_process("load_after_prepare", {2})) {
      CHECK_THAT(output, Catch::Contains("gradients after a local or no_sync pass are equal"));
    }
  }
}

// Trains `variant` for 5 steps on 2 ranks, and the same with Python's DistributedDataParallel
// from the same start on the same data; rank 0's parameters and buffers must agree.
void check_matches_python_ddp(const std::string& variant) {
  const fs::path out = make_temp_dir("ddp_" + variant);
  fs::create_directories(out / "initial");
  fs::create_directories(out / "world2");
  // The initial state (rank 0's, which prepare_model broadcasts), then 5 steps on 2 ranks.
  require_success(run_workers(kWorker, {"mlp", (out / "initial").string(), "0", variant}, 0));
  require_success(run_workers(kWorker, {"mlp", (out / "world2").string(), "5", variant}, 2));
  trainrun::runtime::testing::command_output(
      std::string(TRAINRUN_TORCH_PYTHON) + " " + TRAINRUN_DDP_REFERENCE + " " + variant + " " +
      (out / "initial" / "params_rank0.txt").string() + " 5 " + (out / "ddp.txt").string());
  const auto initial = read_numbers(out / "initial" / "params_rank0.txt");
  const auto ddp = read_numbers(out / "ddp.txt");
  const auto ours = read_numbers(out / "world2" / "params_rank0.txt");
  REQUIRE(ddp.size() == ours.size());
  REQUIRE(initial.size() == ours.size());
  double worst = 0;
  double moved = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    worst = std::max(worst, std::abs(ours[i] - ddp[i]));
    moved += std::abs(ddp[i] - initial[i]);
  }
  INFO(variant);
  CHECK(moved > 1e-2);  // training moved the state, so agreeing means something
  CHECK(worst < 1e-5);
}

TEST_CASE("prepare_model on 2 ranks ends where torch's DistributedDataParallel does") {
  SECTION("an MLP") { check_matches_python_ddp("plain"); }
  SECTION("with BatchNorm: parameters and running statistics") {
    check_matches_python_ddp("batchnorm");
  }
}

TEST_CASE("prepare_model: parameters no rank used keep an undefined gradient; frozen ones stay") {
  for (const std::string optimizer : {"adam", "sgd"}) {
    const auto run = run_workers(kWorker, {"unused", optimizer}, 2);
    require_success(run);
    for (const auto& output : run.outputs) {
      INFO(optimizer << ": " << output);
      CHECK_THAT(output, Catch::Contains("unused and frozen untouched: yes") &&
                             Catch::Contains("rank0_only averaged: yes") &&
                             Catch::Contains("spread: 0\n"));
    }
  }
}

TEST_CASE("prepare_model: every rank holds rank 0's buffers after each step") {
  const auto run = run_workers(kWorker, {"batchnorm", "1"}, 2);
  require_success(run);
  for (const auto& output : run.outputs) {
    CHECK_THAT(output,
               Catch::Contains("step 0 buffers equal") && Catch::Contains("step 2 buffers equal"));
  }
  // Without broadcast_buffers each rank keeps its own statistics: the check above can fail.
  const auto off = run_workers(kWorker, {"batchnorm", "0"}, 2);
  require_success(off);
  CHECK_THAT(off.outputs[0], Catch::Contains("step 2 buffers differ"));
}

TEST_CASE("prepare_model: converting the model afterwards fails the next backward clearly") {
  const auto run = run_workers(kWorker, {"convert"}, 2);
  require_success(run);
  for (const auto& output : run.outputs) {
    CHECK_THAT(output, Catch::Contains("refused: prepare_model: a parameter of a prepared model "
                                       "was moved or converted after prepare_model"));
  }
}

TEST_CASE("prepare_data_loader: each rank gets DistributedSampler's shard, reshuffled per epoch") {
  const fs::path out = make_temp_dir("shards");
  const int world = 4;
  const int epochs = 2;
  // 10 does not divide by 4: every rank gets 3 indices, two of them repeated (torch's padding).
  const long size = 10;
  require_success(run_workers(
      kWorker, {"shards", out.string(), std::to_string(epochs), std::to_string(size)}, world));
  std::string command = std::string(TRAINRUN_TORCH_PYTHON) + " " + TRAINRUN_SAMPLER_REFERENCE;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int r = 0; r < world; ++r) {
      command += " " + std::to_string(size) + "," + std::to_string(world) + "," +
                 std::to_string(r) + ",1,0," + std::to_string(epoch) + ",0";
    }
  }
  std::istringstream python(trainrun::runtime::testing::command_output(command));
  std::string line;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::set<long> seen;
    for (int r = 0; r < world; ++r) {
      REQUIRE(std::getline(python, line));
      const auto expected = nlohmann::json::parse(line)["indices"].get<std::vector<long>>();
      const auto indices = read_indices(
          out / ("shard_r" + std::to_string(r) + "_e" + std::to_string(epoch) + ".txt"));
      INFO("rank " << r << " epoch " << epoch);
      CHECK(indices == expected);
      seen.insert(indices.begin(), indices.end());
    }
    CHECK(seen.size() == static_cast<std::size_t>(size));
  }
}

TEST_CASE("report: rank 0 persists metrics and checkpoints; a restarted job resumes") {
  const fs::path storage = make_temp_dir("report");
  const std::map<std::string, std::string> env = {{"TRAINRUN_STORAGE_PATH", storage.string()},
                                                  {"TRAINRUN_EXPERIMENT_NAME", "exp"}};
  const fs::path marker = storage / "crashed.marker";
  // Attempt 0: the last rank dies at epoch 2, as a preempted worker would.
  const auto crashed = run_workers(kWorker, {"train", "4", "0", "2", marker.string()}, 2, env);
  INFO(describe(crashed));
  CHECK(crashed.exit_codes[1] == 7);
  REQUIRE(fs::exists(marker));

  // Attempt 1: the launcher restarts the group; get_checkpoint() gives the last epoch saved.
  auto restarted_env = env;
  restarted_env["TORCHELASTIC_RESTART_COUNT"] = "1";
  const auto resumed =
      run_workers(kWorker, {"train", "4", "0", "2", marker.string()}, 2, restarted_env);
  require_success(resumed);
  CHECK_THAT(resumed.outputs[1], Catch::Contains("resuming at epoch"));
  // get_checkpoint() is rank 0's choice on every rank.
  auto resumed_from = [](const std::string& output) {
    const auto at = output.find("resuming at epoch");
    return at == std::string::npos ? std::string() : output.substr(at, output.find('\n', at) - at);
  };
  CHECK(resumed_from(resumed.outputs[0]) == resumed_from(resumed.outputs[1]));

  const auto lines = metric_lines(storage / "exp");
  std::vector<int> epochs;
  for (const auto& line : lines) {
    CHECK(line["rank"] == 0);  // only rank 0 writes
    epochs.push_back(line["epoch"].get<int>());
  }
  // Each epoch once: either epoch 2 was saved before the crash (rank 0 got there) or not.
  CHECK(epochs == std::vector<int>{0, 1, 2, 3});
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(storage / "exp")) {
    const std::string name = entry.path().filename().string();
    if (name != ".trainrun.lock") kept.push_back(name);
  }
  std::sort(kept.begin(), kept.end());
  CHECK(kept ==
        std::vector<std::string>{"checkpoint_000002", "checkpoint_000003", "metrics.jsonl"});
  CHECK(read_file((storage / "exp" / "checkpoint_000003" / "epoch.txt").string()) == "3\n");
  CHECK_THAT(resumed.outputs[0],
             Catch::Contains("result: ok=1 epoch=3 checkpoint=checkpoint_000003"));
  CHECK_THAT(resumed.outputs[1],
             Catch::Contains("result: ok=1 epoch=3 checkpoint=checkpoint_000003"));
  // Result carries the whole history and the kept checkpoints (newest first without a score).
  for (const auto& output : resumed.outputs) {
    CHECK_THAT(output, Catch::Contains("history: 4 lines, last epoch 3; best: "
                                       "checkpoint_000003(epoch 3) checkpoint_000002(epoch 2)"));
  }
}

TEST_CASE("get_checkpoint: every rank gets rank 0's checkpoint, whatever its own view holds") {
  // Each rank has its own storage path: rank 0's view holds checkpoints 0-1 of "exp", rank 1's a
  // newer 4-5. Inside fit() rank 1 takes rank 0's run directory; and before each of its lookups
  // a checkpoint_000099 that rank 0 never saved appears there (see "agree" in the worker), so a
  // rank that scanned a directory by itself would answer 5 or 99.
  const fs::path storage = make_temp_dir("agree");
  const auto view = [&](int rank) { return storage / ("view" + std::to_string(rank)); };
  require_success(run_workers(kWorker, {"train", "2", "0"}, 0,
                              {{"TRAINRUN_STORAGE_PATH", view(0).string()},
                               {"TRAINRUN_EXPERIMENT_NAME", "exp"}}));
  require_success(run_workers(kWorker, {"train", "6", "0"}, 0,
                              {{"TRAINRUN_STORAGE_PATH", view(1).string()},
                               {"TRAINRUN_EXPERIMENT_NAME", "exp"}}));
  REQUIRE(fs::is_directory(view(0) / "exp" / "checkpoint_000001"));
  REQUIRE(fs::is_directory(view(1) / "exp" / "checkpoint_000005"));

  const fs::path run_dir = view(0) / "exp";
  const auto run = run_workers(kWorker, {"agree", run_dir.string()}, 2,
                               {{"TRAINRUN_STORAGE_PATH", (storage / "view{rank}").string()},
                                {"TRAINRUN_EXPERIMENT_NAME", "exp"}});
  require_success(run);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& output = run.outputs[static_cast<std::size_t>(rank)];
    INFO("rank " << rank << ":\n" << output);
    const std::string prefix = "rank " + std::to_string(rank);
    CHECK_THAT(output, Catch::Contains(prefix + " at the start: " +
                                       (run_dir / "checkpoint_000001").string() + "\n"));
    CHECK_THAT(output, Catch::Contains(prefix + " after a report: " +
                                       (run_dir / "checkpoint_000002").string() + "\n"));
    CHECK_THAT(output, Catch::Contains("result: ok=1 path=" + run_dir.string() + "\n"));
  }
  // Rank 0's run got the report; rank 1's own view is as it was.
  CHECK(metric_lines(run_dir).size() == 3);
  CHECK(metric_lines(view(1) / "exp").size() == 6);
  CHECK_FALSE(fs::exists(run_dir / "checkpoint_000099"));
}

// Starts 2 workers of "train 4 0 2 MARKER" with `launcher` (a command line that ends before the
// program) allowing one restart: the last rank crashes once at epoch 2, and the restarted job
// must resume from the checkpoint of the first attempt, in the same run directory.
void check_restart_resumes(const std::string& program, std::vector<std::string> launcher) {
  const fs::path storage = make_temp_dir("restart");
  const fs::path marker = storage / "crashed.marker";
  for (const std::string arg : {"train", "4", "0", "2"}) launcher.push_back(arg);
  launcher.push_back(marker.string());
  const auto run = run_workers(program, launcher, 0, {{"TRAINRUN_STORAGE_PATH", storage.string()}},
                               std::chrono::seconds(180));
  INFO(describe(run));
  REQUIRE(run.exit_codes[0] == 0);
  CHECK(fs::exists(marker));
  CHECK_THAT(run.outputs[0], Catch::Contains("resuming at epoch"));
  std::vector<fs::path> run_dirs;
  for (const auto& entry : fs::directory_iterator(storage)) {
    if (entry.is_directory()) run_dirs.push_back(entry.path());
  }
  REQUIRE(run_dirs.size() == 1);  // the restarted job found the first attempt's directory
  std::vector<int> epochs;
  for (const auto& line : metric_lines(run_dirs[0])) epochs.push_back(line["epoch"]);
  CHECK(epochs == std::vector<int>{0, 1, 2, 3});
}

void check_torchrun_restart_resumes(const std::vector<std::string>& rendezvous) {
  if (!fs::exists(TRAINRUN_REFERENCE_TORCHRUN)) {
    WARN("no reference torchrun at " TRAINRUN_REFERENCE_TORCHRUN);
    return;
  }
  std::vector<std::string> args = {TRAINRUN_REFERENCE_TORCHRUN, "--nnodes=1", "--nproc_per_node=2",
                                   "--max_restarts=1", "--monitor_interval=0.1"};
  args.insert(args.end(), rendezvous.begin(), rendezvous.end());
  args.push_back("--no_python");
  args.push_back(kWorker);
  check_restart_resumes(TRAINRUN_TORCH_PYTHON, args);
}

TEST_CASE("a job restarted by torchrun resumes from its last checkpoint, with or without an id") {
  const std::string endpoint =
      "--rdzv_endpoint=127.0.0.1:" + std::to_string(trainrun::runtime::testing::free_port());
  SECTION("c10d rendezvous without --rdzv_id") {
    check_torchrun_restart_resumes({"--rdzv_backend=c10d", endpoint});
  }
  SECTION("c10d rendezvous with --rdzv_id") {
    check_torchrun_restart_resumes({"--rdzv_backend=c10d", endpoint, "--rdzv_id=job7"});
  }
  SECTION("static rendezvous") {
    check_torchrun_restart_resumes(
        {"--master_addr=127.0.0.1",
         "--master_port=" + std::to_string(trainrun::runtime::testing::free_port())});
  }
}

#ifdef TRAINRUN_LAUNCHER_BIN
TEST_CASE("a job restarted by trainrun resumes from its last checkpoint, with or without an id") {
  const std::string endpoint =
      "--rdzv-endpoint=127.0.0.1:" + std::to_string(trainrun::runtime::testing::free_port());
  std::vector<std::string> args = {"--nnodes=1",          "--nproc-per-node=2",
                                   "--max-restarts=1",    "--monitor-interval=0.1",
                                   "--rdzv-backend=c10d", endpoint};
  SECTION("c10d rendezvous without --rdzv-id") {}
  SECTION("c10d rendezvous with --rdzv-id") { args.push_back("--rdzv-id=job7"); }
  args.push_back(kWorker);
  check_restart_resumes(TRAINRUN_LAUNCHER_BIN, args);
}
#endif

TEST_CASE("two runs started in the same second keep to their own directories") {
  const fs::path storage = make_temp_dir("same_second");
  // Both runs' clocks are pinned to one second (time() preloaded), so their default names,
  // <program>_<date_time>_<pid>, share the date and time for certain.
  const std::time_t fixed = 1700000000;
  const std::map<std::string, std::string> env = {
      {"TRAINRUN_STORAGE_PATH", storage.string()},
      {"LD_PRELOAD", TRAINRUN_FIXED_TIME_PRELOAD},
      {"TRAINRUN_FIXED_TIME", std::to_string(fixed)}};
  const auto run = run_workers("/bin/sh",
                               {"-c",
                                "\"$0\" train 20 0 & a=$!; \"$0\" train 20 0 & b=$!; "
                                "echo \"started $a $b\"; wait $a && wait $b",
                                kWorker},
                               0, env);
  require_success(run);
  std::tm parts{};
  localtime_r(&fixed, &parts);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d_%H-%M-%S", &parts);
  const auto at = run.outputs[0].find("started ");
  REQUIRE(at != std::string::npos);
  std::istringstream pids(run.outputs[0].substr(at + 8));
  long first = 0;
  long second = 0;
  pids >> first >> second;
  std::set<std::string> expected;
  for (long pid : {first, second}) {
    expected.insert(std::string("runtime_test_worker_") + when + "_" + std::to_string(pid));
  }
  std::set<std::string> run_dirs;
  for (const auto& entry : fs::directory_iterator(storage)) {
    run_dirs.insert(entry.path().filename().string());
  }
  INFO(describe(run));
  REQUIRE(run_dirs == expected);
  for (const auto& name : run_dirs) {
    std::vector<int> epochs;
    for (const auto& line : metric_lines(storage / name)) epochs.push_back(line["epoch"]);
    std::vector<int> all(20);
    std::iota(all.begin(), all.end(), 0);
    CHECK(epochs == all);
    CHECK(read_file((storage / name / "checkpoint_000019" / "epoch.txt").string()) == "19\n");
  }
}

TEST_CASE("Result::best_checkpoints: best first by the score, in either order") {
  const fs::path storage = make_temp_dir("best");
  // Scores (loss) of checkpoints 0-6: 0.5, 0.2, 0.9, 0.1, 0.7, 0.2, none; ties newest first,
  // a checkpoint without a score last; each with its own metrics and files.
  const std::string c0 = "checkpoint_000000(epoch 0, loss 0.5, saved 0) ";
  const std::string c1 = "checkpoint_000001(epoch 1, loss 0.2, saved 1) ";
  const std::string c2 = "checkpoint_000002(epoch 2, loss 0.9, saved 2) ";
  const std::string c3 = "checkpoint_000003(epoch 3, loss 0.1, saved 3) ";
  const std::string c4 = "checkpoint_000004(epoch 4, loss 0.7, saved 4) ";
  const std::string c5 = "checkpoint_000005(epoch 5, loss 0.2, saved 5) ";
  const std::string c6 = "checkpoint_000006(epoch 6, loss none, saved 6) ";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"max"}, c2 + c4 + c0 + c5 + c1 + c3 + c6},
      {{"default"}, c2 + c4 + c0 + c5 + c1 + c3 + c6},  // max unless told
      {{"min"}, c3 + c5 + c1 + c0 + c4 + c2 + c6},
      // num_to_keep = 3: the best three, and the newest for resuming.
      {{"min", "3"}, c3 + c5 + c1 + c6},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> command = {"scores"};
    command.insert(command.end(), args.begin(), args.end());
    const auto run = run_workers(kWorker, command, 0,
                                 {{"TRAINRUN_STORAGE_PATH", storage.string()},
                                  {"TRAINRUN_EXPERIMENT_NAME", "scores_" + args[0] +
                                                                   std::to_string(args.size())}});
    require_success(run);
    INFO(args[0] << " " << args.size());
    CHECK_THAT(run.outputs[0], Catch::Contains("best: " + expected + "\n"));
  }
}

TEST_CASE("an invalid launcher environment reaches the error file and Result::error") {
  const fs::path dir = make_temp_dir("bad_env");
  const auto run = run_workers(kWorker, {"train", "1", "0"}, 0,
                               {{"RANK", "2"},
                                {"LOCAL_RANK", "0"},
                                {"WORLD_SIZE", "2"},
                                {"LOCAL_WORLD_SIZE", "1"},
                                {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", "1"},
                                {"TORCHELASTIC_ERROR_FILE", (dir / "error.json").string()},
                                {"TRAINRUN_STORAGE_PATH", dir.string()}});
  INFO(describe(run));
  CHECK(run.exit_codes[0] == 4);
  CHECK_THAT(run.outputs[0], Catch::Contains("result: ok=0") && Catch::Contains("ConfigError") &&
                                 Catch::Contains("RANK"));
  REQUIRE(fs::exists(dir / "error.json"));
  const auto record = nlohmann::json::parse(read_file((dir / "error.json").string()));
  CHECK_THAT(record["message"]["message"].get<std::string>(), Catch::Contains("RANK"));
}

TEST_CASE("an exception in train_func: error file in a worker, Result::error in local mode") {
  const fs::path dir = make_temp_dir("fail");
  const auto launched =
      run_workers(kWorker, {"fail"}, 2,
                  {{"TORCHELASTIC_ERROR_FILE", (dir / "{rank}" / "error.json").string()},
                   {"TRAINRUN_STORAGE_PATH", dir.string()}});
  INFO(describe(launched));
  CHECK((launched.exit_codes[0] == 1 || launched.exit_codes[1] == 1));
  const fs::path first =
      launched.exit_codes[0] == 1 ? dir / "0" / "error.json" : dir / "1" / "error.json";
  const auto record = nlohmann::json::parse(read_file(first.string()));
  CHECK(record["message"]["message"] == "std::runtime_error: boom in train_func");
  CHECK(std::stoll(record["message"]["extraInfo"]["timestamp"].get<std::string>()) > 1600000000);
  CHECK_FALSE(record["message"]["extraInfo"]["py_callstack"].get<std::string>().empty());

  const auto local = run_workers(kWorker, {"fail"}, 0,
                                 {{"TORCHELASTIC_ERROR_FILE", (dir / "local.json").string()},
                                  {"TRAINRUN_STORAGE_PATH", dir.string()}});
  CHECK(local.exit_codes[0] == 4);
  CHECK_THAT(local.outputs[0],
             Catch::Contains("result error: std::runtime_error: boom in train_func"));
  CHECK(fs::exists(dir / "local.json"));
}

TEST_CASE("TorchTrainer with num_workers starts its own workers and restarts them on failure") {
  const fs::path storage = make_temp_dir("workers");
  const fs::path marker = storage / "crashed.marker";
  // Started without launcher variables: fit() launches 2 copies of the worker program, the last
  // rank crashes once at epoch 1, FailureConfig::max_failures = 1 restarts the group, and the
  // restarted workers resume from the checkpoint of the first attempt.
  const auto parent = run_workers(
      kWorker, {"train", "3", "2", "1", marker.string()}, 0,
      {{"TRAINRUN_STORAGE_PATH", storage.string()}, {"TRAINRUN_EXPERIMENT_NAME", "spawned"}},
      std::chrono::seconds(120));
  INFO(describe(parent));
  REQUIRE(parent.exit_codes[0] == 0);
  CHECK(fs::exists(marker));
  CHECK_THAT(parent.outputs[0], Catch::Contains("crashing at epoch 1"));
  CHECK_THAT(parent.outputs[0], Catch::Contains("resuming at epoch"));
  // The parent's own Result, read from the workers' storage.
  CHECK_THAT(parent.outputs[0],
             Catch::Contains("result: ok=1 epoch=2 checkpoint=checkpoint_000002 path=" +
                             (storage / "spawned").string()));
  std::vector<int> epochs;
  for (const auto& line : metric_lines(storage / "spawned")) epochs.push_back(line["epoch"]);
  CHECK(epochs == std::vector<int>{0, 1, 2});
}

TEST_CASE("TorchTrainer with more workers than a node can run starts none and says why") {
  const fs::path storage = make_temp_dir("workers_bound");
  const fs::path marker = storage / "m";
  // 65537 is above the rendezvous protocol's bound on any machine: refused as trainrun refuses
  // it, before a worker starts, and the failure is the Result's.
  const auto parent = run_workers(
      kWorker, {"train", "1", "65537", "-1", marker.string()}, 0,
      {{"TRAINRUN_STORAGE_PATH", storage.string()}, {"TRAINRUN_EXPERIMENT_NAME", "spawned"}},
      std::chrono::seconds(60));
  INFO(describe(parent));
  CHECK(parent.exit_codes[0] == 4);
  CHECK_THAT(parent.outputs[0],
             Catch::Contains("trainrun: ScalingConfig::num_workers=65537: more workers than one "
                             "node can run: at most "));
  CHECK_THAT(parent.outputs[0],
             Catch::Contains("error: the 65537-worker job failed with exit code 2"));
  CHECK_FALSE(fs::exists(storage / "spawned" / "metrics.jsonl"));
}

TEST_CASE("TorchTrainer with num_workers reports a failed job in Result::error") {
  const fs::path storage = make_temp_dir("workers_fail");
  // Without restarts, a crash ends the job; the parent returns the failure instead of throwing.
  const auto parent = run_workers(kWorker, {"train", "3", "2", "0", (storage / "m").string()}, 0,
                                  {{"TRAINRUN_STORAGE_PATH", storage.string()},
                                   {"TRAINRUN_EXPERIMENT_NAME", "spawned"},
                                   {"TRAINRUN_TEST_MAX_FAILURES", "0"}},
                                  std::chrono::seconds(120));
  INFO(describe(parent));
  CHECK(parent.exit_codes[0] == 4);
  CHECK_THAT(parent.outputs[0], Catch::Contains("result: ok=0"));
  // The root cause is rank 1's exit 7, or rank 0's own error (status 1) when the launcher saw that
  // first: the peer of a dead worker fails its next collective.
  CHECK_THAT(parent.outputs[0],
             Catch::Contains("error: the 2-worker job failed with exit code 7") ||
                 Catch::Contains("error: the 2-worker job failed with exit code 1"));
}
