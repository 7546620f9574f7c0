#include "trainrun/launch/output/output_plan.hpp"

#include <catch2/catch.hpp>

#include "cli/option_values.hpp"

using namespace trainrun::launch;

TEST_CASE("prefix template") {
  CHECK(line_prefix(std::nullopt, "default", 5, 1) == "[default1]:");
  CHECK(line_prefix(std::string("${role_name}:${rank}:${local_rank}|"), "r", 5, 1) == "r:5:1|");
  CHECK(line_prefix(std::string("$rank $local_rank $$ $other $rank_x"), "r", 5, 1) ==
        "5 1 $ $other $rank_x");
  CHECK(line_prefix(std::string("${hostname}:${rank}: "), "r", 3, 0, "r12i0n8") == "r12i0n8:3: ");
  CHECK(line_prefix(std::string("$hostname|"), "r", 3, 0, "h") == "h|");
}

TEST_CASE("duplicate filters: only tee'd console streams, one file per attempt") {
  LaunchConfig c;
  c.duplicate_stdout_filters = {"loss", "a,b"};
  auto p = plan_output(c, 0, "/logs/run/attempt_0/0");
  CHECK(p.out.duplicate_file.empty());  // not tee'd: nothing reaches the console to duplicate
  c.tee = parse_std_spec("3", "-t");
  p = plan_output(c, 0, "/logs/run/attempt_0/0");
  CHECK(p.out.duplicate_file == "/logs/run/attempt_0/filtered_stdout.log");
  CHECK(p.out.filters == std::vector<std::string>{"loss", "a,b"});
  CHECK(p.err.duplicate_file.empty());  // no stderr filters
  c.duplicate_stderr_filters = {"warn"};
  p = plan_output(c, 1, "/logs/run/attempt_2/1");
  CHECK(p.err.duplicate_file == "/logs/run/attempt_2/filtered_stderr.log");
  c.local_ranks_filter = std::vector<int>{0};
  p = plan_output(c, 1, "/logs/run/attempt_2/1");
  CHECK(p.out.duplicate_file.empty());
  CHECK(p.err.duplicate_file.empty());
}

TEST_CASE("output routes") {
  LaunchConfig c;
  auto p = plan_output(c, 0, "/d");
  CHECK(p.out.route == StreamRoute::inherit);
  CHECK(p.err.route == StreamRoute::inherit);
  c.redirects = parse_std_spec("1", "-r");
  c.tee = parse_std_spec("2", "-t");
  p = plan_output(c, 0, "/d");
  CHECK(p.out.route == StreamRoute::file);
  CHECK(p.out.file == "/d/stdout.log");
  CHECK(p.err.route == StreamRoute::tee);
  CHECK(p.err.file == "/d/stderr.log");
  c.local_ranks_filter = std::vector<int>{1};
  p = plan_output(c, 0, "/d");
  CHECK(p.err.route == StreamRoute::file);
  p = plan_output(c, 1, "/d");
  CHECK(p.err.route == StreamRoute::tee);
}
