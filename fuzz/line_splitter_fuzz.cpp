// Worker output through the tee's line splitter, in arbitrary pieces: every output line carries
// the prefix, and removing the prefixes gives back the input (plus a final newline).
#include <algorithm>

#include "fuzz_util.hpp"
#include "trainrun/launch/output/tee_reader.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t step = 1 + data[0] % 32;
  const char* text = reinterpret_cast<const char*>(data + 1);
  const std::size_t n = size - 1;
  const std::string prefix = "[p0]:";
  LineSplitter splitter(prefix);
  std::string out;
  for (std::size_t pos = 0; pos < n; pos += step)
    splitter.feed(text + pos, std::min(step, n - pos), out);
  splitter.finish(out);

  std::string expected(text, n);
  if (!expected.empty() && expected.back() != '\n') expected += '\n';
  std::string stripped;
  std::size_t pos = 0;
  while (pos < out.size()) {
    FUZZ_CHECK(out.compare(pos, prefix.size(), prefix) == 0);
    pos += prefix.size();
    std::size_t nl = out.find('\n', pos);
    FUZZ_CHECK(nl != std::string::npos);
    stripped.append(out, pos, nl + 1 - pos);
    pos = nl + 1;
  }
  FUZZ_CHECK(stripped == expected);
  return 0;
}
