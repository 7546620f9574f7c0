// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE expansion. Input: template, NUL, role.
#include "fuzz_util.hpp"
#include "trainrun/launch/output/output_plan.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto parts = trainrun::fuzz::split_nul(trainrun::fuzz::as_view(data, size));
  const std::string& templ = parts[0];
  const std::string role = parts.size() > 1 ? parts[1] : "default";
  const int rank = size > 0 ? data[0] * 1000003 : 0;
  const int local_rank = size > 1 ? data[1] : 0;
  std::string prefix = line_prefix(templ, role, rank, local_rank);
  // Expansion replaces names by short values: it never grows a template without a '$' in it.
  if (templ.find('$') == std::string::npos) FUZZ_CHECK(prefix == templ);
  FUZZ_CHECK(line_prefix(std::nullopt, role, rank, local_rank) ==
             "[" + role + std::to_string(local_rank) + "]:");
  return 0;
}
