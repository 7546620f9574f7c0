#include "rollcall/collectives.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace trainrun::launch;
using nlohmann::json;

namespace {

// A dump of tests/launch/data/flight_recorder/, written there by make_dumps.py under torch 2.15's
// launcher with Gloo.
json dump_of(const std::string& scenario, int rank) {
  const std::string path = std::string(TRAINRUN_FLIGHT_RECORDER_DIR) + "/" + scenario + "/rank_" +
                           std::to_string(rank) + ".json";
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Every rank of a scenario, summarized as its node would send it; two ranks a node.
std::vector<RankCollectives> job_of(const std::string& scenario, int world) {
  std::vector<RankCollectives> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back({r, "node" + std::to_string(r / 2), compact_collectives(dump_of(scenario, r)),
                     "stuck_here() (train.py:19)"});
  return ranks;
}

using Lines = std::vector<std::string>;

json entry(const std::string& group, long seq, const std::string& op, const json& sizes) {
  return {{"process_group", {group, "undefined"}},
          {"collective_seq_id", seq},
          {"p2p_seq_id", 0},
          {"is_p2p", false},
          {"profiling_name", "nccl:" + op},
          {"input_sizes", sizes},
          {"output_sizes", sizes},
          {"input_dtypes", {"Float"}},
          {"output_dtypes", {"Float"}},
          {"state", "completed"},
          {"retired", true}};
}

// A rank's summary with one group whose last collective is #seq, pending or not.
json summary_at(const std::string& group, long seq, bool pending,
                const std::string& op = "all_reduce") {
  auto last = entry(group, seq, op, {{64}});
  if (pending) {
    last["state"] = "started";
    last["retired"] = false;
  }
  return compact_collectives(
      {{"version", "2.10"}, {"entries", {entry(group, seq - 1, op, {{64}}), last}}});
}

}  // namespace

TEST_CASE("dtypes read as torch spells them in Python", "[collectives]") {
  CHECK(python_dtype("Float") == "float32");
  CHECK(python_dtype("Double") == "float64");
  CHECK(python_dtype("Half") == "float16");
  CHECK(python_dtype("BFloat16") == "bfloat16");
  CHECK(python_dtype("Long") == "int64");
  CHECK(python_dtype("Int") == "int32");
  CHECK(python_dtype("Bool") == "bool");
  CHECK(python_dtype("Float8_e4m3fn") == "float8_e4m3fn");
  CHECK(python_dtype("Quaternion") == "Quaternion");
}

TEST_CASE("a rank's dump is summarized by group, its last collectives each", "[collectives]") {
  // Rank 0 of two: a broadcast, four all_reduces, and the fifth, in which it waits (Gloo leaves
  // every entry "scheduled"; the finished ones are retired).
  const json compact = compact_collectives(dump_of("two_ranks_behind", 0));
  REQUIRE_FALSE(compact.contains("error"));
  CHECK(compact["version"] == "2.10");
  REQUIRE(compact["groups"].size() == 1);
  const json& group = compact["groups"]["0"];
  CHECK(group["desc"] == "default_pg");
  CHECK_FALSE(group.contains("p2p"));
  REQUIRE(group["collectives"].size() == kCollectivesKept);
  CHECK(group["collectives"][0]["seq"] == 3);
  CHECK(group["collectives"][3] == json({{"seq", 6},
                                         {"op", "all_reduce"},
                                         {"in_sizes", {{4096}}},
                                         {"in_dtypes", {"float32"}},
                                         {"out_sizes", {{4096}}},
                                         {"out_dtypes", {"float32"}},
                                         {"state", "pending"}}));
  CHECK(group["collectives"][2]["state"] == "completed");

  // Each group of the subgroup job apart, under its name, with its description.
  const json pair = compact_collectives(dump_of("subgroup", 2))["groups"];
  CHECK(pair.size() == 2);
  CHECK(pair["2"]["desc"] == "pair_b");
  CHECK(pair["2"]["collectives"].back()["seq"] == 4);
  CHECK(pair["0"]["collectives"].back()["seq"] == 2);
}

TEST_CASE("NCCL's states and point-to-point operations are read too", "[collectives]") {
  auto started = entry("0", 8, "all_reduce", {{16}});
  started["state"] = "started";
  started["retired"] = false;
  auto send = entry("0", 0, "send 0->1", {{16}});
  send["is_p2p"] = true;
  send["p2p_seq_id"] = 3;
  // A coalesced collective: its operations share the number, and the last one stands for it.
  auto first_of_coalesced = entry("0", 7, "all_reduce", {{1}});
  auto coalesced = entry("0", 7, "coalesced", json::array());
  const json compact = compact_collectives(
      {{"version", "2.10"},
       {"entries",
        {entry("0", 6, "all_gather", {{16}}), first_of_coalesced, coalesced, send, started}}});
  const json& group = compact["groups"]["0"];
  REQUIRE(group["collectives"].size() == 3);
  CHECK(group["collectives"][0]["state"] == "completed");
  CHECK(group["collectives"][1]["op"] == "coalesced");
  CHECK(group["collectives"][2]["state"] == "pending");
  REQUIRE(group["p2p"].size() == 1);
  CHECK(group["p2p"][0]["seq"] == 3);
  CHECK(group["p2p"][0]["op"] == "send 0->1");
}

TEST_CASE("a huge or hostile dump gives a bounded summary", "[collectives]") {
  json entries = json::array();
  json many = json::array();
  for (int t = 0; t < 20; ++t) many.push_back(json(std::vector<int>(20, 2)));
  const std::string long_name(10000, 'g');
  for (int g = 0; g < 100; ++g) {
    for (int seq = 1; seq <= 10; ++seq) {
      auto e = entry(std::to_string(g), seq, "all_reduce", many);
      e["input_dtypes"] = json(std::vector<std::string>(20, "Float"));
      e["process_group"] = {std::to_string(g), "\x1b]0;title\x07" + long_name};
      entries.push_back(std::move(e));
    }
  }
  entries.push_back(entry(long_name + "\xff\xfe", 1, "\x1b[2J" + long_name, {{1}}));
  const json compact = compact_collectives({{"version", "2.10"}, {"entries", entries}});
  REQUIRE_FALSE(compact.contains("error"));
  const auto& groups = compact["groups"];
  CHECK(groups.size() == kCollectiveGroupsKept);
  CHECK(compact["groups_left_out"] == 101 - kCollectiveGroupsKept);
  // The groups used last are kept: the long one and 99 back to 69.
  CHECK(groups.contains("99"));
  CHECK(groups.contains("69"));
  CHECK_FALSE(groups.contains("68"));
  const auto& last = groups["99"]["collectives"];
  REQUIRE(last.size() == kCollectivesKept);
  CHECK(last.front()["seq"] == 7);
  CHECK(last.back()["in_sizes"].size() == 4);
  CHECK(last.back()["in_sizes"][0].size() == 8);
  CHECK(last.back()["in_left_out"] == 16);
  CHECK(last.back()["in_dtypes"].size() == 4);
  // Names and operations bounded, without control characters, and valid UTF-8 to serialize.
  for (const auto& [name, group] : groups.items()) {
    CHECK(name.size() <= 128);
    CHECK(group["desc"].get<std::string>().find('\x1b') == std::string::npos);
    CHECK(group["collectives"][0]["op"].get<std::string>().size() < 1000);
  }
  CHECK(compact.dump().size() < 64 * 1024);

  // The worst: every field as long as it may be, every size the longest number.
  json worst = json::array();
  const json biggest =
      json(std::vector<json>(20, json(std::vector<long>(20, -9000000000000000000))));
  const std::string controls(1000, '\x01');
  for (int g = 0; g < 40; ++g) {
    for (int seq = 1; seq <= 6; ++seq) {
      for (const bool p2p : {false, true}) {
        auto e = entry(std::to_string(g) + controls, seq, controls, biggest);
        e["input_dtypes"] = e["output_dtypes"] = json(std::vector<std::string>(20, controls));
        e["is_p2p"] = p2p;
        worst.push_back(std::move(e));
      }
    }
  }
  const json bounded = compact_collectives({{"version", controls}, {"entries", worst}});
  REQUIRE_FALSE(bounded.contains("error"));
  CHECK(bounded.dump().size() < 512 * 1024);
}

TEST_CASE("a dump of the wrong shape says what is wrong, and never throws", "[collectives]") {
  CHECK(compact_collectives("dump") == json({{"error", "the dump is not a JSON object"}}));
  CHECK(compact_collectives(json::object()) ==
        json({{"error", "the dump has neither \"version\" nor \"entries\""}}));
  CHECK(compact_collectives({{"version", "2.10"}, {"entries", 4}}) ==
        json({{"error", "the dump's \"entries\" is not a list"}}));
  CHECK(compact_collectives({{"entries", {7}}}) == json({{"error", "entry 0 is not an object"}}));

  auto no_group = entry("0", 1, "all_reduce", {{4}});
  no_group.erase("process_group");
  CHECK(compact_collectives({{"entries", {no_group}}}) ==
        json({{"error", "entry 0 has no \"process_group\""}}));
  auto text_seq = entry("0", 1, "all_reduce", {{4}});
  text_seq["collective_seq_id"] = "1";
  CHECK(compact_collectives({{"entries", {entry("0", 1, "all_reduce", {{4}}), text_seq}}}) ==
        json({{"error", "entry 1: \"collective_seq_id\" is not an integer"}}));
  auto odd_sizes = entry("0", 1, "all_reduce", {{4}});
  odd_sizes["input_sizes"] = {{1.5}};
  CHECK(compact_collectives({{"entries", {odd_sizes}}}) ==
        json({{"error", "entry 0: \"input_sizes\" has a size that is not an integer"}}));
  auto flat_sizes = entry("0", 1, "all_reduce", {{4}});
  flat_sizes["output_sizes"] = {4, 4};
  CHECK(compact_collectives({{"entries", {flat_sizes}}}) ==
        json({{"error", "entry 0: \"output_sizes\" is not a list of shapes"}}));

  // A dump of an idle job (no collective yet) is no error.
  CHECK(compact_collectives({{"version", "2.10"}}) ==
        json({{"version", "2.10"}, {"groups", json::object()}}));
}

TEST_CASE("with two ranks, the one that never entered the collective is named", "[collectives]") {
  const auto verdict = judge_collectives(job_of("two_ranks_behind", 2));
  CHECK(verdict.lines == Lines{"rank 1 (node0) never entered collective #6 (all_reduce, group 0) "
                               "that rank 0 waits in; rank 1 is in stuck_here() (train.py:19)"});
  CHECK(verdict.behind == std::vector<int>{1});
  CHECK(verdict.table == Lines{"group 0 (default_pg): rank 0 at #6 all_reduce(4096 float32), "
                               "pending; rank 1 at #5 all_reduce(4096 float32), completed"});
}

TEST_CASE("the rank behind the others is named, with where it is", "[collectives]") {
  auto job = job_of("four_ranks_behind", 4);
  const auto verdict = judge_collectives(job);
  CHECK(verdict.lines == Lines{"rank 3 (node1) never entered collective #6 (all_reduce, group 0) "
                               "that ranks 0-2 wait in; rank 3 is in stuck_here() (train.py:19)"});
  CHECK(verdict.behind == std::vector<int>{3});
  CHECK(verdict.table == Lines{"group 0 (default_pg): ranks 0-2 at #6 all_reduce(4096 float32), "
                               "pending; rank 3 at #5 all_reduce(4096 float32), completed"});
  // The job summary: each rank's last collective and the group's verdict.
  REQUIRE(verdict.json["groups"].size() == 1);
  const json& group = verdict.json["groups"][0];
  CHECK(group["group"] == "0");
  CHECK(group["desc"] == "default_pg");
  CHECK(group["lines"] == json(verdict.lines));
  REQUIRE(group["ranks"].size() == 4);
  CHECK(group["ranks"][3] == json({{"rank", 3},
                                   {"seq", 5},
                                   {"op", "all_reduce"},
                                   {"in_sizes", {{4096}}},
                                   {"in_dtypes", {"float32"}},
                                   {"state", "completed"}}));
  CHECK(verdict.json["behind"] == json({3}));
  CHECK(verdict.json["unread"] == json::array());

  // Without a where, the line ends with the collective; without a node, the rank stands alone.
  job[3].where = "";
  job[3].node = "";
  CHECK(judge_collectives(job).lines ==
        Lines{"rank 3 never entered collective #6 (all_reduce, group 0) that ranks 0-2 wait in"});
}

TEST_CASE("a rank that calls another operation is a mismatch", "[collectives]") {
  const auto verdict = judge_collectives(job_of("op_mismatch", 4));
  CHECK(verdict.lines ==
        Lines{"collective #6 of group 0: ranks 0-2 called all_reduce(4096 float32), "
              "rank 3 called all_gather(8 float32)"});
  CHECK(verdict.behind.empty());
  CHECK(verdict.table == Lines{"group 0 (default_pg): ranks 0-2 at #6 all_reduce(4096 float32), "
                               "pending; rank 3 at #6 all_gather(8 float32), pending"});
}

TEST_CASE("a rank that sends another size is a mismatch, even where Gloo let it through",
          "[collectives]") {
  const auto verdict = judge_collectives(job_of("size_mismatch", 2));
  CHECK(verdict.lines == Lines{"collective #6 of group 0: rank 0 called broadcast(4096 float32), "
                               "rank 1 called broadcast(2048 float32)"});
  CHECK(verdict.behind.empty());
}

TEST_CASE("a healthy job has nothing to say", "[collectives]") {
  const auto verdict = judge_collectives(job_of("healthy", 4));
  CHECK(verdict.lines.empty());
  CHECK(verdict.behind.empty());
  CHECK(verdict.table == Lines{"group 0 (default_pg): ranks 0-3 at #6 barrier(), completed"});
  CHECK(verdict.json["groups"][0]["lines"] == json::array());
}

TEST_CASE("every rank inside the same collective: the hang is inside it", "[collectives]") {
  const auto verdict = judge_collectives(job_of("inside", 2));
  CHECK(verdict.lines ==
        Lines{"every rank of group 0 waits in collective #7 (all_reduce): the hang "
              "is inside it, not before it"});
  CHECK(verdict.behind.empty());
  CHECK(verdict.table ==
        Lines{"group 0 (default_pg): ranks 0-1 at #7 all_reduce(134217728 float32), pending"});
}

TEST_CASE("a subgroup is judged among its own ranks", "[collectives]") {
  // Ranks 0-1 use group 1, ranks 2-3 group 2, where rank 3 is behind; ranks 0-1 idle.
  const auto verdict = judge_collectives(job_of("subgroup", 4));
  CHECK(verdict.lines == Lines{"rank 3 (node1) never entered collective #4 (all_reduce, group 2) "
                               "that rank 2 waits in; rank 3 is in stuck_here() (train.py:19)"});
  CHECK(verdict.behind == std::vector<int>{3});
  CHECK(verdict.table ==
        Lines{"group 0 (default_pg): ranks 0-3 at #2 all_reduce(4096 float32), completed",
              "group 1 (pair_a): ranks 0-1 at #3 all_reduce(4096 float32), completed",
              "group 2 (pair_b): rank 2 at #4 all_reduce(4096 float32), pending; rank 3 at #3 "
              "all_reduce(4096 float32), completed"});
}

TEST_CASE("ranks without a summary are left out and named", "[collectives]") {
  auto job = job_of("four_ranks_behind", 4);
  job[1].compact = nullptr;
  job[2].compact = compact_collectives("not a dump");
  job.push_back({4, "node2", nullptr, ""});
  const auto verdict = judge_collectives(job);
  CHECK(verdict.lines ==
        Lines{"rank 3 (node1) never entered collective #6 (all_reduce, group 0) "
              "that rank 0 waits in; rank 3 is in stuck_here() (train.py:19)",
              "note: the flight recorders of ranks 1,4 could not be read: none came",
              "note: rank 2's flight recorder could not be read: the dump is not a "
              "JSON object"});
  CHECK(verdict.json["unread"] == json({{{"rank", 1}, {"error", "none came"}},
                                        {{"rank", 2}, {"error", "the dump is not a JSON object"}},
                                        {{"rank", 4}, {"error", "none came"}}}));

  // A summary of another shape (from a peer of another version) is no reason to throw.
  job[0].compact = {{"groups", {{"0", {{"collectives", {{{"seq", "six"}}}}}}}}};
  job[3].compact = {{"groups", 5}};
  const auto worse = judge_collectives(job);
  CHECK(worse.lines.size() == 4);
  CHECK(worse.lines[0] ==
        "note: rank 0's flight recorder could not be read: group 0, collective 0: \"seq\" is not "
        "an integer");
  CHECK(worse.table.empty());
}

TEST_CASE("many ranks behind share a line; a group only one rank used says so", "[collectives]") {
  std::vector<RankCollectives> job;
  for (int r = 0; r < 10; ++r)
    job.push_back({r, "node" + std::to_string(r / 4), summary_at("0", r < 4 ? 9 : 8, r < 4), ""});
  job[4].where = "load_batch() (data.py:7)";
  job.push_back({10, "node2", summary_at("5", 3, true), ""});
  const auto verdict = judge_collectives(job);
  CHECK(
      verdict.lines ==
      Lines{"ranks 4-9 (6) never entered collective #9 (all_reduce, group 0) that ranks 0-3 wait "
            "in; rank 4 (node1) is in load_batch() (data.py:7)",
            "rank 10 (node2) waits in collective #3 (all_reduce, group 5); no other rank read has "
            "used group 5"});
  CHECK(verdict.behind == std::vector<int>{4, 5, 6, 7, 8, 9});
  CHECK(verdict.table ==
        Lines{"group 0: ranks 0-3 at #9 all_reduce(64 float32), pending; ranks 4-9 "
              "at #8 all_reduce(64 float32), completed",
              "group 5: rank 10 at #3 all_reduce(64 float32), pending"});
}

TEST_CASE("ranks still waiting in a collective others completed are said so", "[collectives]") {
  // A broadcast's root is done once it has sent; the receivers still wait.
  std::vector<RankCollectives> job;
  for (int r = 0; r < 3; ++r)
    job.push_back({r, "node0", summary_at("0", 4, r > 0, "broadcast"), ""});
  CHECK(judge_collectives(job).lines ==
        Lines{"ranks 1-2 wait in collective #4 (broadcast, group 0), which rank 0 completed"});
}

TEST_CASE("a job of many groups gives a bounded verdict", "[collectives]") {
  // Forty ranks, each alone in a group of its own, waiting.
  std::vector<RankCollectives> job;
  for (int r = 0; r < 40; ++r)
    job.push_back({r, "", summary_at(std::to_string(100 + r), 2, true), ""});
  const auto verdict = judge_collectives(job);
  REQUIRE(verdict.lines.size() == 12);
  CHECK(verdict.lines[0] ==
        "rank 0 waits in collective #2 (all_reduce, group 100); no other rank read "
        "has used group 100");
  CHECK(verdict.lines[11] == "... and 29 more in the job summary");
  REQUIRE(verdict.table.size() == kCollectiveGroupsKept + 1);
  CHECK(verdict.table.back() == "(8 more groups)");
  CHECK(verdict.json["groups"].size() == kCollectiveGroupsKept);
}

TEST_CASE("a member of a group that has entered none of its collectives is behind in it",
          "[collectives]") {
  // The bootstrap lists the groups a rank belongs to; Gloo's dump has no entry of a group the
  // rank never used.
  auto dump = [](std::vector<json> entries, std::vector<std::string> groups) {
    return compact_collectives(
        {{"version", "2.10"}, {"entries", std::move(entries)}, {"trainrun_groups", groups}});
  };
  const json unused = dump({entry("0", 3, "all_reduce", {{64}})}, {"0", "1"});
  REQUIRE(unused["groups"].size() == 2);
  CHECK(unused["groups"]["1"]["collectives"] == json::array());
  // Names that are not strings, or a list that is not one, are passed over.
  CHECK(compact_collectives({{"version", "2.10"}, {"trainrun_groups", {1, nullptr}}})["groups"] ==
        json::object());
  CHECK(compact_collectives({{"version", "2.10"}, {"trainrun_groups", "0"}})["groups"] ==
        json::object());

  // Ranks 1 and 2 have a group of their own. Rank 2 is stuck in its own code before both groups'
  // collectives; rank 1 waits for it inside the pair's all_reduce, and so never enters the
  // default group's that rank 0 waits in. The cause is rank 2: rank 1 is said to wait.
  auto pending = [](json e) {
    e["state"] = "started";
    e["retired"] = false;
    return e;
  };
  std::vector<RankCollectives> job = {
      {0, "node0",
       dump({entry("0", 3, "all_reduce", {{64}}), pending(entry("0", 4, "all_reduce", {{64}}))},
            {"0"}),
       "<module>() (train.py:25)"},
      {1, "node0",
       dump({entry("0", 3, "all_reduce", {{64}}), pending(entry("1", 1, "all_reduce", {{16}}))},
            {"0", "1"}),
       "<module>() (train.py:25)"},
      {2, "node1", dump({entry("0", 3, "all_reduce", {{64}})}, {"0", "1"}),
       "stuck_here() (train.py:10)"}};
  const auto verdict = judge_collectives(job);
  CHECK(verdict.lines ==
        Lines{"rank 2 (node1) never entered collective #4 (all_reduce, group 0) that rank 0 waits "
              "in; rank 2 is in stuck_here() (train.py:10)",
              "rank 2 (node1) never entered collective #1 (all_reduce, group 1) that rank 1 waits "
              "in; rank 2 is in stuck_here() (train.py:10)",
              "rank 1 (node0) never entered collective #4 (all_reduce, group 0) that rank 0 waits "
              "in; rank 1 waits in collective #1 (all_reduce, group 1)"});
  CHECK(verdict.behind == std::vector<int>{2});
  CHECK(verdict.table ==
        Lines{"group 0: rank 0 at #4 all_reduce(64 float32), pending; ranks 1-2 at #3 "
              "all_reduce(64 float32), completed",
              "group 1: rank 1 at #1 all_reduce(16 float32), pending; rank 2 entered none"});
  const json& pair = verdict.json["groups"][1];
  CHECK(pair["ranks"][1] == json({{"rank", 2},
                                  {"seq", nullptr},
                                  {"op", nullptr},
                                  {"in_sizes", json::array()},
                                  {"in_dtypes", json::array()},
                                  {"state", "none"}}));

  // Two ranks that each wait for the other in another group: both are the cause.
  std::vector<RankCollectives> cycle = {
      {0, "node0", dump({pending(entry("a", 1, "all_reduce", {{8}}))}, {"a", "b"}), ""},
      {1, "node0", dump({pending(entry("b", 1, "all_reduce", {{8}}))}, {"a", "b"}), ""}};
  const auto both = judge_collectives(cycle);
  CHECK(both.behind == std::vector<int>{0, 1});
  CHECK(both.lines ==
        Lines{"rank 1 (node0) never entered collective #1 (all_reduce, group a) that rank 0 waits "
              "in; rank 1 waits in collective #1 (all_reduce, group b)",
              "rank 0 (node0) never entered collective #1 (all_reduce, group b) that rank 1 waits "
              "in; rank 0 waits in collective #1 (all_reduce, group a)"});
}
