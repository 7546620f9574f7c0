#include "trainrun/stacks/groups.hpp"

#include <catch2/catch.hpp>

using namespace trainrun::stacks;

namespace {

Frame py(const std::string& function, const std::string& file, int line) {
  return Frame{function, file, line, "", FrameKind::python};
}

// A Python rank whose main thread has these frames (innermost first) under a native read.
RankStack python_rank(int rank, const std::string& host, std::vector<Frame> frames) {
  RankStack rs;
  rs.rank = rank;
  rs.host = host;
  rs.stack.pid = 100 + rank;
  rs.stack.tool = "py-spy";
  Thread main;
  main.tid = rs.stack.pid;
  main.frames.push_back(
      Frame{"0x7f0012" + std::to_string(rank), "", 0, "/usr/lib/libc.so.6", FrameKind::native});
  for (auto& f : frames) main.frames.push_back(f);
  rs.stack.threads.push_back(main);
  return rs;
}

std::vector<Frame> waiting(int line) {
  return {py("all_reduce", "/usr/lib/python3/dist-packages/torch/distributed/c10d.py", 1500),
          py("train_step", "/home/u/train.py", line), py("main", "/home/u/train.py", 60)};
}

}  // namespace

TEST_CASE("rank ranges") {
  CHECK(rank_ranges({3, 0, 1}) == "0-1,3");
  CHECK(rank_ranges({5}) == "5");
  CHECK(rank_ranges({0, 1, 2, 4, 5, 7, 7}) == "0-2,4-5,7");
  CHECK(rank_ranges({}) == "");
}

TEST_CASE("identical stacks grouped, the smallest group first, the odd rank named") {
  // Rank 1 waits at another line of train_step and with another native address: same place.
  std::vector<RankStack> stacks = {
      python_rank(0, "node0", waiting(40)),
      python_rank(1, "node0", waiting(41)),
      python_rank(2, "node1",
                  {py("stuck_here", "/home/u/train.py", 41), py("main", "/home/u/train.py", 60)}),
      python_rank(3, "node1", waiting(40)),
  };
  const auto groups = group_stacks(stacks);
  REQUIRE(groups.size() == 2);
  CHECK(format_groups(groups) ==
        "rank 2 (1): stuck_here <- main\n"
        "ranks 0-1,3 (3): all_reduce <- train_step <- main\n");
  CHECK(groups[1].hosts == std::vector<std::string>{"node0", "node1"});
  const auto json = groups_json(groups);
  CHECK(json[1]["ranks"] == nlohmann::json({0, 1, 3}));
  CHECK(json[0]["frames"][0]["function"] == "stuck_here");
  CHECK(json[0]["frames"][0]["file"] == "train.py");

  const auto suspects = odd_ranks(groups, stacks);
  REQUIRE(suspects.size() == 1);
  CHECK(suspects[0].rank == 2);
  CHECK(suspects[0].host == "node1");
  CHECK(suspects[0].where == "stuck_here() (train.py:41)");
  CHECK(describe_suspects(suspects, groups) ==
        "rank 2 on node1 is in stuck_here() (train.py:41) while ranks 0-1,3 wait in all_reduce "
        "(c10d.py:1500)");
}

TEST_CASE("the user's frame of a suspect skips the libraries") {
  std::vector<RankStack> stacks = {python_rank(0, "a", waiting(40)),
                                   python_rank(1, "a", waiting(40)),
                                   python_rank(2, "b", waiting(40))};
  stacks[2].stack.threads[0].frames.insert(
      stacks[2].stack.threads[0].frames.begin() + 1,
      py("barrier", "/usr/lib/python3/dist-packages/torch/distributed/c10d.py", 3000));
  const auto suspects = odd_ranks(group_stacks(stacks), stacks);
  REQUIRE(suspects.size() == 1);
  CHECK(suspects[0].where == "train_step() (train.py:40)");
}

TEST_CASE("no odd rank when all agree, when halves split, or when the others disagree") {
  auto one = [](int rank, const std::string& f) {
    return python_rank(rank, "h", {py(f, "/home/u/t.py", 1)});
  };
  std::vector<RankStack> agree = {one(0, "a"), one(1, "a")};
  CHECK(odd_ranks(group_stacks(agree), agree).empty());
  std::vector<RankStack> halves = {one(0, "a"), one(1, "a"), one(2, "b"), one(3, "b")};
  CHECK(odd_ranks(group_stacks(halves), halves).empty());
  std::vector<RankStack> three = {one(0, "a"), one(1, "a"), one(2, "a"),
                                  one(3, "b"), one(4, "b"), one(5, "c")};
  CHECK(odd_ranks(group_stacks(three), three).empty());
  // Two odd ones out against one majority: both named, the smallest groups first.
  std::vector<RankStack> two_odd = {one(0, "a"), one(1, "a"), one(2, "a"), one(3, "b"),
                                    one(4, "c")};
  const auto groups = group_stacks(two_odd);
  CHECK(format_groups(groups) == "rank 3 (1): b\nrank 4 (1): c\nranks 0-2 (3): a\n");
  const auto suspects = odd_ranks(groups, two_odd);
  REQUIRE(suspects.size() == 2);
  CHECK(suspects[0].rank == 3);
  CHECK(suspects[1].rank == 4);
}

TEST_CASE("stacks without frames group by system call and wait channel") {
  auto proc_only = [](int rank, const std::string& syscall, const std::string& wchan) {
    RankStack rs;
    rs.rank = rank;
    rs.host = "h";
    rs.stack.pid = 50 + rank;
    rs.stack.tool = "/proc";
    Thread t;
    t.tid = rs.stack.pid;
    t.state = "S (sleeping)";
    t.syscall = syscall;
    t.wchan = wchan;
    rs.stack.threads.push_back(t);
    return rs;
  };
  std::vector<RankStack> stacks = {proc_only(0, "futex", "futex_wait_queue"),
                                   proc_only(1, "read", "anon_pipe_read"),
                                   proc_only(2, "futex", "futex_wait_queue")};
  const auto groups = group_stacks(stacks);
  CHECK(format_groups(groups) ==
        "rank 1 (1): syscall read, wchan anon_pipe_read\n"
        "ranks 0,2 (2): syscall futex, wchan futex_wait_queue\n");
  const auto suspects = odd_ranks(groups, stacks);
  REQUIRE(suspects.size() == 1);
  CHECK(suspects[0].where == "syscall read, wchan anon_pipe_read");
}

TEST_CASE("a stack travels as JSON and back") {
  const RankStack rs = python_rank(3, "n", waiting(40));
  nlohmann::json j = rs.stack;
  const Stack back = j.get<Stack>();
  CHECK(nlohmann::json(back) == j);
  CHECK(back.threads[0].frames[1].kind == FrameKind::python);
  CHECK(format_stack(back) == format_stack(rs.stack));
}
