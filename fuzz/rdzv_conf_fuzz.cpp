// --rdzv-conf KEY=VALUE,...
#include "cli/option_values.hpp"
#include "fuzz_util.hpp"
#include "trainrun/launch/rdzv/rendezvous_options.hpp"

using namespace trainrun::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto entries =
        rdzv_conf_entries(std::string(trainrun::fuzz::as_view(data, size)), "--rdzv-conf");
    for (const auto& [key, value] : entries) {
      FUZZ_CHECK(!key.empty());
      FUZZ_CHECK(key.find(',') == std::string::npos && value.find(',') == std::string::npos);
    }
    const RendezvousConf conf = check_rdzv_conf(entries);
    FUZZ_CHECK(conf.liveness.heartbeat_timeout > conf.liveness.keep_alive_interval);
  } catch (const UsageError&) {
  }
  return 0;
}
