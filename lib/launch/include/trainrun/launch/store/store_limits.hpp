#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace trainrun::launch {

// Where the kernel's accept queue on the node that serves the job's store (net.core.somaxconn,
// which caps every listen backlog, trainrun's too) is shorter than the `ranks` that connect to
// the store at once at each start: the line that says so, with the sysctl that would not be.
// nullopt where it holds them. Pure.
std::optional<std::string> store_backlog_shortfall(std::size_t ranks, std::uint64_t somaxconn);
// The same for this machine's net.core.somaxconn now (nullopt where it cannot be read).
std::optional<std::string> store_backlog_shortfall(std::size_t ranks);

}  // namespace trainrun::launch
