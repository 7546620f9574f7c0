#include <catch2/catch.hpp>

#include "output.hpp"

using namespace trainrun::launch;

TEST_CASE("lines are split and prefixed; partial lines wait") {
  LineSplitter s("[p]:");
  std::string out;
  s.feed("a\nbb", 4, out);
  CHECK(out == "[p]:a\n");
  out.clear();
  s.feed("b\nc\n", 4, out);
  CHECK(out == "[p]:bbb\n[p]:c\n");
  out.clear();
  s.feed("tail", 4, out);
  CHECK(out.empty());
  s.finish(out);
  CHECK(out == "[p]:tail\n");
  out.clear();
  s.finish(out);
  CHECK(out.empty());
}

TEST_CASE("over-long lines are emitted in pieces") {
  LineSplitter s("");
  std::string big(LineSplitter::kMaxLine + 10, 'x');
  std::string out;
  s.feed(big.data(), big.size(), out);
  CHECK(out.size() == LineSplitter::kMaxLine + 10 + 1);
}

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
