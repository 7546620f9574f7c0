#pragma once

// lib/base's reads of whole files and of this program's executable, header-only: each includer
// compiles them with its own C++ string ABI, so the runtime (lib/runtime, built against a LibTorch
// of either ABI, without linking lib/base) reads as lib/base's compiled code does. GCC tags each
// function returning the new ABI's std::string ([abi:cxx11]), so the two copies never meet.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>

namespace trainrun {

// What the descriptor `fd` gives until its end, a read error or `max_bytes`, whichever comes
// first; `fd` stays open. Memory grows with what is read, not with the bound.
inline std::string read_up_to(int fd, std::size_t max_bytes) {
  std::string text;
  char buffer[65536];
  while (text.size() < max_bytes) {
    const std::size_t ask = std::min(sizeof buffer, max_bytes - text.size());
    const ssize_t n = ::read(fd, buffer, ask);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

// Everything the descriptor `fd` gives until its end or a read error (a pipe, a file); `fd`
// stays open.
inline std::string read_all(int fd) { return read_up_to(fd, std::string::npos); }

// At most `max_bytes` of the file `path` from its start (a /proc command line may be megabytes, an
// error file may grow while it is read): nullopt when it cannot be opened.
inline std::optional<std::string> read_file_prefix(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  std::string text = read_up_to(fd, max_bytes);
  ::close(fd);
  return text;
}

// The whole of the file `path`, as much of it as can be read (a read error ends it, as it ends
// an ifstream's); nullopt when it cannot be opened. For files trainrun knows the kind of (a
// /proc or /sys entry, a file the user names for a purpose); read_regular_file (system.hpp)
// refuses a FIFO, a device or a file too long.
inline std::optional<std::string> read_file(const std::string& path) {
  return read_file_prefix(path, std::string::npos);
}

// The first word of the file `path` (a /sys or /proc value, a cgroup's number); "" where it
// cannot be read or holds none.
inline std::string read_first_word(const std::string& path) {
  const std::optional<std::string> text = read_file_prefix(path, 4096);
  if (!text) return "";
  const std::size_t start = text->find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return "";
  return text->substr(start, text->find_first_of(" \t\r\n", start) - start);
}

// This program's own executable (/proc/self/exe); "" where it cannot be read.
inline std::string self_exe() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "";
}

}  // namespace trainrun
