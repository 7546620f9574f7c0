#include <catch2/catch.hpp>
#include <cstdio>
#include <set>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
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

TEST_CASE("this machine's addresses are its interfaces', loopback among them", "[base]") {
  const auto addresses = this_machine_addresses();
  const std::set<std::string> unique(addresses.begin(), addresses.end());
  CHECK(unique.count("127.0.0.1") == 1);
  for (const auto& a : addresses) CHECK(a.find('%') == std::string::npos);
}

TEST_CASE("escape_control shows control characters as escapes", "[base]") {
  CHECK(escape_control("plain text, ünïcode\ttab") == "plain text, ünïcode\ttab");
  CHECK(escape_control("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(escape_control("a\nb\rc\x07\x7f") == "a\\x0ab\\x0dc\\x07\\x7f");
  CHECK(escape_control("a\nb", true) == "a\nb");
  CHECK(escape_control(std::string("nul\0here", 8)) == "nul\\x00here");
  // C1 controls in UTF-8: U+009B is an 8-bit CSI.
  CHECK(escape_control("x\xc2\x9b"
                       "2J") == "x\\u009b2J");
  CHECK(escape_control("\xc2\xa0") == "\xc2\xa0");  // U+00A0 is no control
}

TEST_CASE("utf8_prefix and utf8_suffix never split a character", "[base]") {
  const std::string s = "a\xc3\xa9z";  // a é z
  CHECK(utf8_prefix(s, 2) == "a");
  CHECK(utf8_prefix(s, 3) == "a\xc3\xa9");
  CHECK(utf8_prefix(s, 10) == s);
  CHECK(utf8_suffix(s, 2) == "z");
  CHECK(utf8_suffix(s, 3) == "\xc3\xa9z");
}

TEST_CASE("valid_utf8_prefix ends before the first byte that is not UTF-8", "[base]") {
  for (const std::string valid : {"", "run-7", "a\xc3\xa9z", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                  "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf"})
    CHECK(valid_utf8_prefix(valid) == valid);
  CHECK(valid_utf8_prefix("r\xff") == "r");
  CHECK(valid_utf8_prefix("ab\xc3") == "ab");            // cut inside a character
  CHECK(valid_utf8_prefix("a\xc3(") == "a");             // a lead byte without its continuation
  CHECK(valid_utf8_prefix("a\x80") == "a");              // a continuation alone
  CHECK(valid_utf8_prefix("a\xc0\xaf") == "a");          // overlong '/'
  CHECK(valid_utf8_prefix("a\xe0\x80\xaf") == "a");      // overlong '/'
  CHECK(valid_utf8_prefix("a\xed\xa0\x80") == "a");      // a surrogate
  CHECK(valid_utf8_prefix("a\xf4\x90\x80\x80") == "a");  // above U+10FFFF
  CHECK(valid_utf8_prefix("\xc3\xa9\xf5\x80\x80\x80") == "\xc3\xa9");
}

TEST_CASE("percent_encode keeps a name's safe bytes and leaves no '/'", "[base]") {
  CHECK(percent_encode("job-7_v1.2") == "job-7_v1.2");
  CHECK(percent_encode("a/nodes/x") == "a%2Fnodes%2Fx");
  // '%' itself is encoded: different texts never read the same.
  CHECK(percent_encode("a%2Fb") == "a%252Fb");
  CHECK(percent_encode(std::string("\xff \x01", 3)) == "%FF%20%01");
}

TEST_CASE("count_of is singular for exactly one", "[base]") {
  CHECK(count_of(1, "node") == "1 node");
  CHECK(count_of(2, "node") == "2 nodes");
  CHECK(count_of(0, "worker") == "0 workers");
  CHECK(count_of(1, "process", "processes") == "1 process");
  CHECK(count_of(3, "process", "processes") == "3 processes");
}

TEST_CASE("trim, split and ends_with", "[base]") {
  CHECK(trim(" \t a b \t") == "a b");
  CHECK(trim(" \t ").empty());
  CHECK(split("a,,b", ',') == std::vector<std::string>{"a", "", "b"});
  CHECK(split("", ',') == std::vector<std::string>{""});
  CHECK(ends_with("train.py", ".py"));
  CHECK_FALSE(ends_with("py", ".py"));
}

TEST_CASE("edit_distance counts single-byte edits", "[base]") {
  CHECK(edit_distance("standlone", "standalone") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("same", "same") == 0);
}

TEST_CASE("read_file reads a file whole, past any buffer, and nothing it cannot open", "[base]") {
  const std::string path = "/tmp/trainrun_read_file_" + random_hex(8);
  const std::string text(200000, 'x');
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  CHECK(read_file(path) == std::optional<std::string>(text));
  std::remove(path.c_str());
  CHECK_FALSE(read_file(path));
  // A /proc entry, whose size says nothing.
  const auto status = read_file("/proc/self/status");
  REQUIRE(status);
  CHECK(status->find("\nPid:") != std::string::npos);
}

TEST_CASE("read_file_prefix reads at most its bound; read_first_word a file's first word", "[base]") {
  const std::string path = "/tmp/trainrun_read_prefix_" + random_hex(8);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::fputs("  \n 0x8086 more\n", f);
    std::fclose(f);
  }
  CHECK(read_file_prefix(path, 5) == std::optional<std::string>("  \n 0"));
  CHECK(read_file_prefix(path, 1000) == std::optional<std::string>("  \n 0x8086 more\n"));
  CHECK(read_first_word(path) == "0x8086");
  std::remove(path.c_str());
  CHECK_FALSE(read_file_prefix(path, 10));
  CHECK(read_first_word(path).empty());
  // A /proc command line, of which only the start is wanted.
  const auto cmdline = read_file_prefix("/proc/self/cmdline", 3);
  REQUIRE(cmdline);
  CHECK(cmdline->size() == 3);
}
