#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

// self_exe, read_file and read_all: header-only, for either string ABI.
#include "trainrun/base/files.hpp"

namespace trainrun {

// This machine's host name, as gethostname() gives it; "localhost" if it cannot be read.
std::string host_name();

// This machine's name as Python's socket.getfqdn() gives it (torchrun 2.x's MASTER_ADDR on one
// node): the reverse lookup of the host name's first address, the first of that name and its
// aliases that holds a dot, else that name; the host name itself when a lookup fails. Blocks on
// the resolver.
std::string fully_qualified_host_name();

// Whether `host` resolves and its first address is one of this machine's (a socket can be bound
// to it): where a process on this machine that listens on every address can be reached.
bool names_this_machine(const std::string& host);

// The IP addresses of this machine's interfaces, in this network namespace (getifaddrs), as
// text (a link-local IPv6 address without its scope). Empty where they cannot be read.
std::vector<std::string> this_machine_addresses();

// `n` random lower-case hexadecimal digits from the kernel's random source (getrandom): fit
// for nonces. Throws std::runtime_error if the kernel gives none.
std::string random_hex(std::size_t n);

// A random identifier in the 8-4-4-4-12 form of a UUID (a standalone job's run id).
std::string random_run_id();

// The wall-clock time in seconds since the Unix epoch (for records other machines read: job
// summaries, etcd round deadlines). Intervals are measured on the steady clock instead.
double unix_time();

// The backlog every listening socket of trainrun asks for: as large as listen() takes, so that the
// kernel's own cap, net.core.somaxconn, decides (SOMAXCONN, 4,096, would cap it below a raised
// sysctl: thousands of agents connecting at once then have SYNs dropped and retried after 1 s;
// 65,535 would cap the job's store below its ranks past 65,535).
inline constexpr int kListenBacklog = std::numeric_limits<int>::max();

// Reads exactly `size` bytes from `fd`, retrying on EINTR. False on end of file or error.
bool read_exactly(int fd, void* data, std::size_t size);

// The whole of a small file (a /proc entry, a registry entry), at most 64 MiB; empty when it
// cannot be read (read_regular_file).
std::string read_small_file(const std::string& path);

// The whole of the regular file `path` (a /proc entry counts), without waiting: a directory, a
// FIFO, a socket or a device is refused, and so is a file longer than `max_bytes` (/dev/zero
// would fill the memory). Throws std::runtime_error saying why (strerror's words, or "a directory",
// "not a regular file", "longer than N bytes").
std::string read_regular_file(const std::string& path, std::size_t max_bytes);

}  // namespace trainrun
