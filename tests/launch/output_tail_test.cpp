#include "trainrun/launch/output/output_tail.hpp"

#include <catch2/catch.hpp>
#include <string>


using namespace trainrun::launch;

namespace {

std::string tail_of(const std::string& text, size_t chunk = 7) {
  OutputTail tail;
  for (size_t i = 0; i < text.size(); i += chunk)
    tail.feed(text.data() + i, std::min(chunk, text.size() - i));
  return tail.text();
}

}  // namespace

TEST_CASE("a stream's tail is its last lines, without the final newline") {
  CHECK(tail_of("") == "");
  CHECK(tail_of("\n\n") == "");
  CHECK(tail_of("one\ntwo\n") == "one\ntwo");
  CHECK(tail_of("no newline") == "no newline");
  std::string many;
  for (int i = 1; i <= 30; ++i) many += "line " + std::to_string(i) + "\n";
  const std::string t = tail_of(many);
  CHECK(t.rfind("line 11\n", 0) == 0);
  CHECK(t.size() == t.find("line 30") + 7);
}

TEST_CASE("a stream's tail is bounded in bytes and never starts inside a line") {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::string(100, 'a' + i % 26) + "\n";
  const std::string t = tail_of(text, 4096);
  CHECK(t.size() <= OutputTail::kMaxBytes);
  CHECK(t.size() == 101 * 20 - 1);  // 20 whole lines fit
  std::string wide;
  for (int i = 0; i < 10; ++i) wide += std::string(1000, 'x') + "\n";
  const std::string w = tail_of(wide + "end");
  CHECK(w.size() <= OutputTail::kMaxBytes);
  std::string four;
  for (int i = 0; i < 4; ++i) four += std::string(1000, 'x') + "\n";
  CHECK(w == four + "end");  // a fifth line would pass the bound
  // One line longer than the bound: its end is shown.
  const std::string one = tail_of(std::string(100000, 'y') + "z");
  CHECK(one.size() <= OutputTail::kMaxBytes);
  CHECK(one.back() == 'z');
}

TEST_CASE("a stream's tail has its control characters escaped") {
  CHECK(tail_of("\x1b[31mred\x1b[0m\rdone\n") == "\\x1b[31mred\\x1b[0m\\x0ddone");
}

