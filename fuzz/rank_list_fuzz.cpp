// --local-ranks-filter.
#include "cli/option_values.hpp"
#include "fuzz_util.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto ranks =
        parse_rank_list(std::string(trainrun::fuzz::as_view(data, size)), "--local-ranks-filter");
    FUZZ_CHECK(!ranks.empty());
    for (int r : ranks) FUZZ_CHECK(r >= 0);
  } catch (const UsageError&) {
  }
  return 0;
}
