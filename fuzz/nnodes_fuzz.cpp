// --nnodes / PET_NNODES.
#include "cli/option_values.hpp"
#include "fuzz_util.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto [lo, hi] = parse_nnodes(std::string(trainrun::fuzz::as_view(data, size)), "--nnodes");
    FUZZ_CHECK(lo >= 1 && lo <= hi);
  } catch (const UsageError&) {
  }
  return 0;
}
