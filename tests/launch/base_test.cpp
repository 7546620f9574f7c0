#include <catch2/catch.hpp>
#include <set>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/wording.hpp"

using namespace trainrun;

TEST_CASE("parse_integer takes whole base-10 integers only", "[base]") {
  CHECK(parse_integer("0") == 0);
  CHECK(parse_integer("-12") == -12);
  CHECK(parse_integer("+2") == 2);
  CHECK(parse_integer("9223372036854775807") == 9223372036854775807LL);
  for (const char* bad : {"", " 1", "1 ", "1.5", "0x10", "12a", "9223372036854775808", "-"})
    CHECK_FALSE(parse_integer(bad).has_value());
}

TEST_CASE("parse_number takes finite decimal numbers only", "[base]") {
  CHECK(parse_number("0.5") == 0.5);
  CHECK(parse_number("1e3") == 1000.0);
  CHECK(parse_number("-2") == -2.0);
  for (const char* bad : {"", " 1", "nan", "inf", "-inf", "1e999", "1s", "."})
    CHECK_FALSE(parse_number(bad).has_value());
}

TEST_CASE("random_hex gives fresh hex digits of the length asked", "[base]") {
  std::set<std::string> seen;
  for (std::size_t n : {1u, 7u, 32u, 64u}) {
    const std::string h = random_hex(n);
    CHECK(h.size() == n);
    CHECK(h.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(random_hex(32));
  }
  CHECK(seen.size() == 4);
  const std::string id = random_run_id();
  REQUIRE(id.size() == 36);
  CHECK((id[8] == '-' && id[13] == '-' && id[18] == '-' && id[23] == '-'));
}

TEST_CASE("host_name is never empty", "[base]") { CHECK_FALSE(host_name().empty()); }

TEST_CASE("count_of is singular for exactly one", "[base]") {
  CHECK(count_of(1, "node") == "1 node");
  CHECK(count_of(2, "node") == "2 nodes");
  CHECK(count_of(0, "worker") == "0 workers");
  CHECK(count_of(1, "process", "processes") == "1 process");
  CHECK(count_of(3, "process", "processes") == "3 processes");
}
