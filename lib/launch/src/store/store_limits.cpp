#include "trainrun/launch/store/store_limits.hpp"

#include <fmt/format.h>

#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

std::optional<std::string> store_backlog_shortfall(std::size_t ranks, std::uint64_t somaxconn) {
  if (somaxconn == 0 || ranks <= somaxconn) return std::nullopt;
  return fmt::format(
      "the job's c10d store takes a connection from each of its {} ranks, all at once at each "
      "start, and this node's accept queue holds {} (net.core.somaxconn): connects past it are "
      "dropped and tried again about 1 s later; `sysctl -w net.core.somaxconn={}` on this node "
      "avoids it",
      ranks, somaxconn, ranks);
}

std::optional<std::string> store_backlog_shortfall(std::size_t ranks) {
  const std::optional<long long> somaxconn =
      read_positive_integer("/proc/sys/net/core/somaxconn");
  if (!somaxconn) return std::nullopt;
  return store_backlog_shortfall(ranks, static_cast<std::uint64_t>(*somaxconn));
}

}  // namespace trainrun::launch
