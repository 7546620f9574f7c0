#include "trainrun/launch/output/log_dir.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "test_support.hpp"

using namespace trainrun::launch;

TEST_CASE("a run directory's name keeps safe bytes and percent-encodes the rest") {
  CHECK(run_dir_name("job-7_a.b") == "job-7_a.b");
  CHECK(run_dir_name("../x") == "..%2Fx");
  CHECK(run_dir_name("team/job7") == "team%2Fjob7");
  CHECK(run_dir_name("50%") == "50%25");
  CHECK(run_dir_name(std::string("a\0b", 3)) == "a%00b");
  CHECK(run_dir_name("\xc3\xa9t\xc3\xa9") == "%C3%A9t%C3%A9");
  CHECK(run_dir_name("a b") != run_dir_name("a_b"));
}

TEST_CASE("a long run id's directory name is a head and a hash, within the limit") {
  const std::string id(255, 'a');
  const std::string name = run_dir_name(id);
  CHECK(name.size() == kMaxRunDirName);
  CHECK(name.rfind(std::string(kMaxRunDirName - 17, 'a') + "-", 0) == 0);
  CHECK(name == run_dir_name(id));
  CHECK(name != run_dir_name(std::string(254, 'a') + "b"));
  // Encoded, never cut through a %XX.
  for (size_t pad = 0; pad < 3; ++pad) {
    const std::string slashes = run_dir_name(std::string(pad, 'a') + std::string(200, '/'));
    CHECK(slashes.size() <= kMaxRunDirName);
    const std::string head = slashes.substr(0, slashes.rfind('-'));
    CHECK((head.size() - pad) % 3 == 0);
  }
  CHECK(run_dir_name(std::string(kMaxRunDirName, 'x')) == std::string(kMaxRunDirName, 'x'));
}

TEST_CASE("the log tree of any run id is inside the base") {
  const std::string base = trainrun::test::make_temp_dir("log_dir");
  for (const std::string& id :
       {std::string("../x"), std::string("team/job7"), std::string(255, '/')}) {
    const LogDir logs = LogDir::create(base, id);
    CHECK(logs.run_dir().rfind(base + "/", 0) == 0);
    CHECK(logs.run_dir().find('/', base.size() + 1) == std::string::npos);
    CHECK(logs.make_rank_dir(0, 0).rfind(logs.run_dir() + "/", 0) == 0);
  }
}
