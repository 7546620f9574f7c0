#include "trainrun/launch/workers/descriptors.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>

namespace trainrun::launch {

namespace {

// The soft limit trainrun was started with; RLIM_INFINITY until raise_descriptor_limit().
rlim_t original_soft = RLIM_INFINITY;

}  // namespace

void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) original_soft = soft;
}

std::optional<std::uint64_t> original_descriptor_limit() {
  if (original_soft == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::uint64_t>(original_soft);
}

rendezvous::ServerLimits server_limits_for(std::size_t workers) {
  rendezvous::ServerLimits limits;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return limits;
  const std::size_t reserved = kLauncherDescriptors + kDescriptorsPerWorker * workers;
  const std::size_t total = static_cast<std::size_t>(limit.rlim_cur);
  // Never none at all: a node with too little room still takes part, with few strangers.
  const std::size_t left = total > reserved + 32 ? total - reserved : 32;
  limits.max_pending = std::min(limits.max_pending, std::max<std::size_t>(left / 4, 8));
  limits.max_admitted = std::min(limits.max_admitted, left - limits.max_pending);
  return limits;
}

std::optional<std::string> store_descriptor_shortfall(std::size_t ranks, std::size_t local_workers,
                                                      std::uint64_t soft, std::uint64_t hard) {
  const std::uint64_t needed = ranks + kLauncherDescriptors + kDescriptorsPerWorker * local_workers;
  if (soft >= needed) return std::nullopt;
  return fmt::format(
      "the job's c10d store holds a connection from each of its {} ranks, and this agent may "
      "open {} files (RLIMIT_NOFILE, hard limit {}): ranks past that wait to connect until others "
      "close; `ulimit -n {}` before trainrun (as root, or LimitNOFILE= for a service) gives it "
      "room",
      ranks, soft, hard, needed);
}

std::optional<std::string> store_descriptor_shortfall(std::size_t ranks,
                                                      std::size_t local_workers) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::nullopt;
  return store_descriptor_shortfall(ranks, local_workers,
                                    static_cast<std::uint64_t>(limit.rlim_cur),
                                    static_cast<std::uint64_t>(limit.rlim_max));
}

}  // namespace trainrun::launch
