#include "trainrun/launch/core/file_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainrun/base/files.hpp"
#include "trainrun/base/numbers.hpp"
#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return false;
    }
  }
  return true;
}

void write_file_atomically(const std::string& path, const std::string& text, bool durable) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char* step) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw SetupError(fmt::format("cannot write {}: {} ({})", path, std::strerror(error), step));
  };
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create");
  const bool written = write_all(fd, text.data(), text.size()) && (!durable || ::fsync(fd) == 0);
  const int error = errno;
  ::close(fd);
  errno = error;
  if (!written) fail("write");
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("rename");
}

bool remove_empty_tree(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (!dir) return false;
  bool empty = true;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string child = path + "/" + name;
    struct stat st {};
    if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && remove_empty_tree(child)) continue;
    empty = false;
  }
  closedir(dir);
  return empty && ::rmdir(path.c_str()) == 0;
}

std::optional<long long> read_positive_integer(const std::string& path) {
  const std::string text = read_first_word(path);
  if (text.empty()) return std::nullopt;
  const std::optional<long long> n = parse_integer(text);
  if (!n || *n <= 0) return std::nullopt;
  return n;
}

}  // namespace trainrun::launch
