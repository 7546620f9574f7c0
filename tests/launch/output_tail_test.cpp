#include "trainrun/launch/output/output_tail.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "trainrun/launch/workers/python_exec.hpp"

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

TEST_CASE("which Python: the -v line and the hint for an interpreter without torch") {
  PythonExec p{"/usr/bin/python3", PythonSource::path, "3.11.2"};
  CHECK(
      python_line(p) ==
      "Python workers run /usr/bin/python3 (Python 3.11.2; python3 from PATH, PYTHON_EXEC unset)");
  CHECK(missing_torch_hint(0, p) ==
        "rank 0's Python (/usr/bin/python3, 3.11.2) has no module torch: set PYTHON_EXEC to the "
        "python of your environment, or activate it");
  PythonExec q{"/opt/py", PythonSource::variable, ""};
  CHECK(python_line(q) == "Python workers run /opt/py (version unknown; from PYTHON_EXEC)");
  CHECK(missing_torch_hint(3, q).rfind("rank 3's Python (/opt/py, from PYTHON_EXEC) has", 0) == 0);

  ProcessFailure other, missing;
  other.rank = 0;
  other.stderr_tail = "ModuleNotFoundError: No module named 'torchvision'";
  missing.rank = 2;
  missing.stderr_tail = "Traceback ...\nModuleNotFoundError: No module named 'torch'";
  CHECK_FALSE(rank_without_torch({other}));
  CHECK(rank_without_torch({other, missing}) == 2);
}

TEST_CASE("an interpreter that does not say its version is asked no further") {
  CHECK(python_version("/bin/true") == "");
  CHECK(python_version("/nonexistent/python3") == "");
}
