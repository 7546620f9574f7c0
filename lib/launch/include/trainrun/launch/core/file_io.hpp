#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace trainrun::launch {

// Writes all of `data` to `fd`, retrying on EINTR and waiting out EAGAIN. False on error.
bool write_all(int fd, const char* data, std::size_t size);

// Writes `text` to `path` as a whole or not at all: a temporary file in the same directory,
// then rename. `durable`: synced to the disk before the rename (a result that must survive a
// crash of the machine); without, a file that only describes a running job (the registry, the
// heartbeat) costs no fsync, which takes milliseconds. Throws SetupError naming the path and the
// reason.
void write_file_atomically(const std::string& path, const std::string& text, bool durable = true);

// The first word of a small file (a /proc/sys or cgroup value) as a positive integer; nothing
// when the file cannot be read or holds no such number ("max").
std::optional<long long> read_positive_integer(const std::string& path);

// Removes `path` if it and everything under it are directories; true when it is gone.
bool remove_empty_tree(const std::string& path);

}  // namespace trainrun::launch
