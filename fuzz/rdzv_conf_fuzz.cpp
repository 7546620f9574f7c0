// --rdzv-conf KEY=VALUE,...
#include "fuzz_util.hpp"
#include "trainrun/launch/cli/command_line.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto conf = parse_rdzv_conf(std::string(trainrun::fuzz::as_view(data, size)), "--rdzv-conf");
    for (const auto& [key, value] : conf) {
      FUZZ_CHECK(!key.empty());
      FUZZ_CHECK(key.find(',') == std::string::npos && value.find(',') == std::string::npos);
    }
  } catch (const UsageError&) {
  }
  return 0;
}
