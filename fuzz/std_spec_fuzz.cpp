// --redirects / --tee: one value or a per-rank map.
#include "cli/option_values.hpp"
#include "fuzz_util.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    StdSpec spec = parse_std_spec(std::string(trainrun::fuzz::as_view(data, size)), "--tee");
    auto ok = [](Std s) { return static_cast<int>(s) >= 0 && static_cast<int>(s) <= 3; };
    FUZZ_CHECK(ok(spec.all_ranks));
    FUZZ_CHECK(spec.is_map || spec.per_rank.empty());
    for (const auto& [rank, s] : spec.per_rank) FUZZ_CHECK(rank >= 0 && ok(s));
    FUZZ_CHECK(ok(spec.for_rank(0)) && ok(spec.for_rank(1 << 20)));
  } catch (const UsageError&) {
  }
  return 0;
}
