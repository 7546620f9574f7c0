#pragma once

#include <cstddef>

namespace trainrun::launch {

// Writes all of `data` to `fd`, retrying on EINTR and waiting out EAGAIN. False on error.
bool write_all(int fd, const char* data, std::size_t size);

// Reads exactly `size` bytes from `fd`, retrying on EINTR. False on end of file or error.
bool read_exactly(int fd, void* data, std::size_t size);

}  // namespace trainrun::launch
