// Slurm host lists (SLURM_STEP_NODELIST).
#include <stdexcept>

#include "fuzz_util.hpp"
#include "trainrun/base/hostlist.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const trainrun::HostList list = trainrun::HostList::parse(trainrun::fuzz::as_view(data, size));
    FUZZ_CHECK(list.size() >= 1 && list.size() <= trainrun::HostList::kMaxHosts);
    // Expanding is bounded by kMaxHosts; keep each run short.
    if (list.size() <= 4096) {
      const auto names = list.expand();
      FUZZ_CHECK(names.size() == list.size());
      FUZZ_CHECK(names.front() == list.first());
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
