#include "output_plan.hpp"

#include <catch2/catch.hpp>

using namespace trainrun::launch;

TEST_CASE("prefix template") {
  CHECK(line_prefix(std::nullopt, "default", 5, 1) == "[default1]:");
  CHECK(line_prefix(std::string("${role_name}:${rank}:${local_rank}|"), "r", 5, 1) == "r:5:1|");
  CHECK(line_prefix(std::string("$rank $local_rank $$ $other $rank_x"), "r", 5, 1) ==
        "5 1 $ $other $rank_x");
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
