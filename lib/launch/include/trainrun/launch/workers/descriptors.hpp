#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "trainrun/rendezvous/options.hpp"

namespace trainrun::launch {

// The launcher's descriptor limit. Raised at start from the soft to the hard RLIMIT_NOFILE, so
// that a flood of connections to the rendezvous cannot take what the workers need; each worker
// gets back the soft limit trainrun was started with, as its user set it.
void raise_descriptor_limit();
// The soft limit trainrun was started with, when raise_descriptor_limit() raised it: what each
// worker gets back. nullopt: unchanged.
std::optional<std::uint64_t> original_descriptor_limit();

// Descriptors kept for the launcher itself (event loop, signals, console, log files, its own
// rendezvous connection, the watchdog's pipe, the job's cgroup) and for each worker (two pipes
// and two log files kept, two pipe ends and an exec-report pipe while it starts).
inline constexpr std::size_t kLauncherDescriptors = 64;
inline constexpr std::size_t kDescriptorsPerWorker = 8;

// The rendezvous server's connection counts for a node running `workers` workers: what the
// descriptor limit leaves once those are reserved, a quarter of it at most for connections
// still in their handshake (and at most the defaults).
rendezvous::ServerLimits server_limits_for(std::size_t workers);

// Where the job's c10d store, served by this agent, cannot hold a connection from each of `ranks`
// ranks beside what the agent keeps for itself and its `local_workers` (the limits `soft` and
// `hard`, RLIMIT_NOFILE, after raise_descriptor_limit): the line that says so, with the
// `ulimit -n` that would. nullopt where they fit. Pure.
std::optional<std::string> store_descriptor_shortfall(std::size_t ranks, std::size_t local_workers,
                                                      std::uint64_t soft, std::uint64_t hard);
// The same for this process's limits now.
std::optional<std::string> store_descriptor_shortfall(std::size_t ranks, std::size_t local_workers);

}  // namespace trainrun::launch
