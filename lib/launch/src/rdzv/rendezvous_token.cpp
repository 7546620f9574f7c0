#include "trainrun/launch/rdzv/rendezvous_token.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {
namespace {

constexpr std::size_t kMaxTokenBytes = 64 * 1024;

std::string trim_trailing(std::string s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

[[noreturn]] void refuse_file(const std::string& path, const std::string& why) {
  throw UsageError(fmt::format("--rdzv-conf token_file={}: {}", path, why));
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// Only a regular file, private to its owner unless `any_mode`: checked on the open descriptor
// (no race with a rename), which was opened without blocking, so a FIFO cannot hang the launcher.
void check_token_file(int fd, const std::string& path, bool any_mode) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    refuse_file(path, fmt::format("cannot read it: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    refuse_file(path, fmt::format("it is {}, not a regular file; put the token in a file",
                                  file_kind(st.st_mode)));
  }
  if (!any_mode && (st.st_mode & (S_IRGRP | S_IROTH))) {
    refuse_file(
        path,
        fmt::format("readable by {} (mode {:04o}); make it private with `chmod 600 {}`, "
                    "or accept it with --rdzv-conf token_file_mode=any",
                    (st.st_mode & S_IROTH) ? "others" : "its group", st.st_mode & 07777, path));
  }
}

std::string read_token_file(const std::string& path, bool any_mode) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) refuse_file(path, fmt::format("cannot read it: {}", std::strerror(errno)));
  std::string text;
  try {
    check_token_file(fd, path, any_mode);
    char buffer[4096];
    while (text.size() <= kMaxTokenBytes) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) refuse_file(path, fmt::format("cannot read it: {}", std::strerror(errno)));
      if (n == 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (text.size() > kMaxTokenBytes) {
    refuse_file(path, fmt::format("larger than {} bytes; is it the right file?", kMaxTokenBytes));
  }
  text = trim_trailing(std::move(text));
  if (text.empty()) refuse_file(path, "the file is empty; put the shared token in it");
  return text;
}

}  // namespace

std::optional<std::string> load_token(const TokenSource& source,
                                      const std::map<std::string, std::string>& env) {
  if (source.handed_over) return source.handed_over;
  if (source.file) return read_token_file(*source.file, source.any_mode);
  // Set but empty is refused as blank is: either would otherwise turn authentication off.
  if (auto it = env.find(kTokenVariable); it != env.end()) {
    std::string token = trim_trailing(it->second);
    if (token.empty())
      throw UsageError(fmt::format("TRAINRUN_RDZV_TOKEN is {}; set the shared token or unset it",
                                   it->second.empty() ? "empty" : "blank"));
    return token;
  }
  return std::nullopt;
}

}  // namespace trainrun::launch
