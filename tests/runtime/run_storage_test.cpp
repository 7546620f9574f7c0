#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/run_storage.hpp>

#include "worker_processes.hpp"

namespace rt = trainrun::runtime;
namespace fs = std::filesystem;
using rt::testing::make_temp_dir;
using rt::testing::metric_lines;
using rt::testing::read_file;

namespace {

// A checkpoint directory with `files` files of `bytes` bytes, each holding `tag`.
fs::path make_source(const fs::path& root, const std::string& tag, int files = 2,
                     std::size_t bytes = 16) {
  const fs::path dir = root / ("src_" + tag);
  fs::create_directories(dir / "nested");
  for (int i = 0; i < files; ++i) {
    std::ofstream(dir / ("f" + std::to_string(i)), std::ios::binary)
        << std::string(bytes, tag.empty() ? 'x' : tag[0]);
  }
  std::ofstream(dir / "nested" / "tag.txt") << tag;
  return dir;
}

std::vector<std::string> names(const std::vector<rt::Checkpoint>& checkpoints) {
  std::vector<std::string> out;
  for (const auto& c : checkpoints) out.push_back(c.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("record copies the checkpoint into checkpoint_NNNNNN and appends metrics") {
  const fs::path root = make_temp_dir("storage");
  rt::RunStorage storage(root / "run", {});
  const auto persisted = storage.record({{"loss", 0.5}, {"epoch", 0}},
                                        rt::Checkpoint::from_directory(make_source(root, "a")));
  REQUIRE(persisted);
  CHECK(persisted->path() == root / "run" / "checkpoint_000000");
  CHECK(read_file((persisted->path() / "nested" / "tag.txt").string()) == "a");
  storage.record({{"loss", 0.25}, {"epoch", 1}}, std::nullopt);

  const auto lines = metric_lines(root / "run");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["loss"] == 0.5);
  CHECK(lines[0]["training_iteration"] == 1);
  CHECK(lines[0]["checkpoint_dir_name"] == "checkpoint_000000");
  CHECK(lines[1]["checkpoint_dir_name"].is_null());
  CHECK(lines[1]["timestamp"].get<double>() > 1.6e9);
  CHECK(storage.last_metrics()["epoch"] == 1);
  CHECK(storage.latest_checkpoint() == persisted);
}

TEST_CASE("num_to_keep keeps the newest checkpoints") {
  const fs::path root = make_temp_dir("keep");
  rt::CheckpointConfig config;
  config.num_to_keep = 2;
  rt::RunStorage storage(root / "run", config);
  for (int i = 0; i < 5; ++i) {
    storage.record({{"i", i}},
                   rt::Checkpoint::from_directory(make_source(root, std::to_string(i))));
  }
  CHECK(names(storage.checkpoints()) ==
        std::vector<std::string>{"checkpoint_000003", "checkpoint_000004"});
  CHECK_FALSE(fs::exists(root / "run" / "checkpoint_000002"));
}

TEST_CASE("with a score attribute the best are kept, and always the newest") {
  const fs::path root = make_temp_dir("score");
  rt::CheckpointConfig config;
  config.num_to_keep = 2;
  config.checkpoint_score_attribute = "accuracy";
  config.checkpoint_score_order = rt::ScoreOrder::max;
  rt::RunStorage storage(root / "run", config);
  const double accuracy[] = {0.5, 0.9, 0.7, 0.8, 0.1};
  for (int i = 0; i < 5; ++i) {
    storage.record({{"accuracy", accuracy[i]}},
                   rt::Checkpoint::from_directory(make_source(root, std::to_string(i))));
  }
  // Best two are 1 (0.9) and 3 (0.8); 4 is the newest and is kept for resuming.
  CHECK(names(storage.checkpoints()) ==
        std::vector<std::string>{"checkpoint_000001", "checkpoint_000003", "checkpoint_000004"});

  config.checkpoint_score_order = rt::ScoreOrder::min;
  config.num_to_keep = 1;
  rt::RunStorage reopened(root / "run", config);  // scores come back from metrics.jsonl
  reopened.record({{"accuracy", 0.6}}, rt::Checkpoint::from_directory(make_source(root, "z")));
  CHECK(names(reopened.checkpoints()) ==
        std::vector<std::string>{"checkpoint_000004", "checkpoint_000005"});
}

TEST_CASE("NaN and infinite scores rank as the worst, in either order") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto order : {rt::ScoreOrder::max, rt::ScoreOrder::min}) {
    const fs::path root = make_temp_dir("nan_score");
    rt::CheckpointConfig config;
    config.num_to_keep = 2;
    config.checkpoint_score_attribute = "loss";
    config.checkpoint_score_order = order;
    rt::RunStorage storage(root / "run", config);
    const double scores[] = {nan, 0.5, inf, nan, -inf, 0.7, nan, 0.2, nan};
    for (int i = 0; i < 9; ++i) {
      storage.record({{"loss", scores[i]}},
                     rt::Checkpoint::from_directory(make_source(root, std::to_string(i))));
    }
    // The best two finite scores, and the newest (8, NaN) for resuming.
    const std::vector<std::string> expected =
        order == rt::ScoreOrder::max
            ? std::vector<std::string>{"checkpoint_000001", "checkpoint_000005",
                                       "checkpoint_000008"}
            : std::vector<std::string>{"checkpoint_000001", "checkpoint_000007",
                                       "checkpoint_000008"};
    CHECK(names(storage.checkpoints()) == expected);
  }
}

TEST_CASE("a run directory another live process has open is refused, and free once it ends") {
  const fs::path root = make_temp_dir("shared_name");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rt::RunStorage storage(root / "run", {});
    storage.record({{"n", 0}}, rt::Checkpoint::from_directory(make_source(root, "child")));
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  try {
    rt::RunStorage second(root / "run", {});
    FAIL("a second run opened a directory in use");
  } catch (const rt::ConfigError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("is in use by another run (process " + std::to_string(pid) + ")"));
  }
  CHECK(fs::exists(root / "run" / "checkpoint_000000"));  // the refused run touched nothing
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  rt::RunStorage after(root / "run", {});
  CHECK(after.latest_checkpoint()->path().filename() == "checkpoint_000000");
}

TEST_CASE("a reopened run continues numbering and finds its latest checkpoint") {
  const fs::path root = make_temp_dir("resume");
  {
    rt::RunStorage storage(root / "run", {});
    storage.record({{"epoch", 0}}, rt::Checkpoint::from_directory(make_source(root, "a")));
    storage.record({{"epoch", 1}}, rt::Checkpoint::from_directory(make_source(root, "b")));
  }
  CHECK(rt::find_latest_checkpoint(root / "run")->path().filename() == "checkpoint_000001");
  CHECK(rt::read_last_metrics(root / "run")["epoch"] == 1);
  rt::RunStorage again(root / "run", {});
  CHECK(again.latest_checkpoint()->path().filename() == "checkpoint_000001");
  CHECK(again.last_metrics()["epoch"] == 1);
  again.record({{"epoch", 2}}, rt::Checkpoint::from_directory(make_source(root, "c")));
  CHECK(again.latest_checkpoint()->path().filename() == "checkpoint_000002");
  CHECK(metric_lines(root / "run").back()["training_iteration"] == 3);
  CHECK_FALSE(rt::find_latest_checkpoint(root / "empty"));
}

TEST_CASE("leftovers of a crashed save are cleaned and a torn metrics line is cut") {
  const fs::path root = make_temp_dir("torn");
  fs::create_directories(root / "run" / ".tmp_checkpoint_000000_123");
  std::ofstream(root / "run" / "metrics.jsonl") << "{\"epoch\": 0}\n{\"epoch\": 1, \"lo";
  rt::RunStorage storage(root / "run", {});
  CHECK_FALSE(fs::exists(root / "run" / ".tmp_checkpoint_000000_123"));
  CHECK(storage.last_metrics()["epoch"] == 0);
  storage.record({{"epoch", 1}}, std::nullopt);
  const auto lines = metric_lines(root / "run");
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["epoch"] == 1);
}

TEST_CASE("a checkpoint saved just before a crash gets its metrics line back on reopening") {
  const fs::path root = make_temp_dir("relink");
  {
    rt::RunStorage storage(root / "run", {});
    storage.record({{"epoch", 0}}, rt::Checkpoint::from_directory(make_source(root, "a")));
    storage.record({{"epoch", 1}}, rt::Checkpoint::from_directory(make_source(root, "b")));
  }
  // As if the process died after the rename of checkpoint_000001 but before appending its line.
  const auto lines = metric_lines(root / "run");
  std::ofstream(root / "run" / "metrics.jsonl", std::ios::trunc) << lines[0].dump() << "\n";
  rt::RunStorage reopened(root / "run", {});
  const auto repaired = metric_lines(root / "run");
  REQUIRE(repaired.size() == 2);
  CHECK(repaired[1] == lines[1]);
  CHECK(reopened.last_metrics()["epoch"] == 1);
  rt::RunStorage again(root / "run", {});  // nothing left to repair: no duplicate
  CHECK(metric_lines(root / "run").size() == 2);
}

TEST_CASE("the best checkpoints of a run that stopped before a metrics line hold its metrics") {
  // A job whose rank died right after a save: the result's best checkpoints are read before any
  // reopening writes the line back, from the metrics each checkpoint holds.
  const fs::path root = make_temp_dir("best_unlinked");
  {
    rt::RunStorage storage(root / "run", {});
    storage.record({{"epoch", 0}}, rt::Checkpoint::from_directory(make_source(root, "a")));
  }
  std::ofstream(root / "run" / "metrics.jsonl", std::ios::trunc);
  const auto best = rt::read_best_checkpoints(root / "run", {});
  REQUIRE(best.size() == 1);
  CHECK(best[0].second.is_object());
  CHECK(best[0].second.at("epoch") == 0);
}

TEST_CASE("bad input is reported, not crashed on") {
  const fs::path root = make_temp_dir("bad");
  rt::CheckpointConfig zero;
  zero.num_to_keep = 0;
  CHECK_THROWS_WITH(rt::RunStorage(root / "run", zero), Catch::Contains("num_to_keep"));
  rt::RunStorage storage(root / "run", {});
  CHECK_THROWS_WITH(storage.record({{"a", 1}}, rt::Checkpoint::from_directory(root / "missing")),
                    Catch::Contains("does not exist"));
  CHECK_THROWS_AS(storage.record(nlohmann::json::array({1, 2}), std::nullopt), rt::ConfigError);
  CHECK_THROWS_AS(rt::Checkpoint::from_directory(""), rt::ConfigError);
  std::ofstream(root / "file") << "x";
  CHECK_THROWS_AS(rt::RunStorage(root / "file" / "run", {}), rt::RuntimeError);
}

TEST_CASE("metrics holding bytes that are not UTF-8 are written with U+FFFD and never refused") {
  const fs::path root = make_temp_dir("utf8");
  rt::RunStorage storage(root / "run", {});
  const auto persisted = storage.record({{"label", "caf\xc3"}, {"loss", 0.5}, {"\xff", 1}},
                                        rt::Checkpoint::from_directory(make_source(root, "a")));
  REQUIRE(persisted);
  const auto lines = metric_lines(root / "run");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["label"] == "caf\xef\xbf\xbd");
  CHECK(lines[0]["\xef\xbf\xbd"] == 1);
  CHECK(lines[0]["loss"] == 0.5);
  const auto saved = nlohmann::json::parse(
      read_file((persisted->path() / rt::RunStorage::checkpoint_metrics_file_name).string()));
  CHECK(saved["label"] == "caf\xef\xbf\xbd");
  // Nothing half-saved is left beside the checkpoint.
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(root / "run"))
    entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  CHECK(entries ==
        std::vector<std::string>{".trainrun.lock", "checkpoint_000000", "metrics.jsonl"});
  CHECK_THROWS_WITH(storage.record(nlohmann::json("x\xff"), std::nullopt),
                    Catch::Contains("got \"x\xef\xbf\xbd\""));
}

TEST_CASE("a process killed in the middle of saving never loses the previous checkpoint") {
  const fs::path root = make_temp_dir("kill");
  const fs::path small = make_source(root, "first");
  const fs::path big = make_source(root, "big", 32, 512 * 1024);
  int killed_mid_copy = 0;
  for (int attempt = 0; attempt < 6; ++attempt) {
    const fs::path run = root / ("run" + std::to_string(attempt));
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      rt::CheckpointConfig config;
      config.num_to_keep = 1;
      rt::RunStorage storage(run, config);
      storage.record({{"n", 0}}, rt::Checkpoint::from_directory(small));
      (void)!::write(ready[1], "x", 1);
      for (int n = 1;; ++n) storage.record({{"n", n}}, rt::Checkpoint::from_directory(big));
    }
    ::close(ready[1]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 17 * attempt));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));

    for (const auto& entry : fs::directory_iterator(run)) {
      if (entry.path().filename().string().rfind(".tmp_checkpoint_", 0) == 0) ++killed_mid_copy;
    }
    rt::RunStorage reopened(run, {});
    const auto latest = reopened.latest_checkpoint();
    REQUIRE(latest);
    // Whatever survived is complete: the small first one, or a full copy of the big one.
    const std::string tag = read_file((latest->path() / "nested" / "tag.txt").string());
    if (tag == "first") {
      CHECK(fs::file_size(latest->path() / "f0") == 16);
    } else {
      REQUIRE(tag == "big");
      for (int i = 0; i < 32; ++i) {
        CHECK(fs::file_size(latest->path() / ("f" + std::to_string(i))) == 512 * 1024);
      }
    }
    for (const auto& entry : fs::directory_iterator(run)) {
      CHECK(entry.path().filename().string().rfind(".tmp_", 0) != 0);
    }
  }
  // The scenario really happened: at least one kill landed while a copy was in progress.
  CHECK(killed_mid_copy > 0);
}
