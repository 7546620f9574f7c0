#include "trainrun/launch/output/log_dir.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/rendezvous/crypto.hpp"

namespace trainrun::launch {

namespace {

// mkdir -p; throws SetupError naming the directory and the reason.
void make_directories(const std::string& path) {
  if (path.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw SetupError(
          fmt::format("cannot create log directory {}: {}", partial, std::strerror(errno)));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw SetupError(fmt::format("cannot create log directory {}: not a directory", path));
}

}  // namespace

std::string run_dir_name(const std::string& run_id) {
  const std::string name = percent_encode(run_id);
  if (name.size() <= kMaxRunDirName) return name;
  const std::string hash = rendezvous::to_hex(rendezvous::sha256(run_id)).substr(0, 16);
  size_t head = kMaxRunDirName - 1 - hash.size();
  // Not through the middle of a %XX.
  if (name[head - 1] == '%')
    head -= 1;
  else if (name[head - 2] == '%')
    head -= 2;
  return name.substr(0, head) + "-" + hash;
}

LogDir LogDir::create(const std::string& base, const std::string& run_id) {
  LogDir d;
  if (base.empty()) {
    // On disk, as torchrun's (a tempfile directory): a tree kept after a failure, or a log that
    // grows, must not hold the machine's memory as /dev/shm would.
    const char* tmp = std::getenv("TMPDIR");
    const std::string root = tmp && *tmp ? tmp : "/tmp";
    std::string templ = root + "/trainrun_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw SetupError(
          fmt::format("cannot create a log directory under {}: {} (set TMPDIR or --log-dir)", root,
                      std::strerror(errno)));
    d.base_ = buf.data();
    d.temporary_ = true;
  } else {
    d.base_ = base;
    make_directories(base);
  }
  for (int tries = 0;; ++tries) {
    d.run_dir_ = d.base_ + "/" + run_dir_name(run_id) + "_" + random_hex(8);
    if (::mkdir(d.run_dir_.c_str(), 0755) == 0) break;
    if (errno != EEXIST || tries > 10)
      throw SetupError(
          fmt::format("cannot create log directory {}: {}", d.run_dir_, std::strerror(errno)));
  }
  return d;
}

std::string LogDir::rank_dir(int attempt, int local_rank) const {
  return fmt::format("{}/attempt_{}/{}", run_dir_, attempt, local_rank);
}

std::string LogDir::make_rank_dir(int attempt, int local_rank) const {
  std::string dir = rank_dir(attempt, local_rank);
  make_directories(dir);
  return dir;
}

void LogDir::remove_if_empty() const { remove_empty_tree(own_root()); }

}  // namespace trainrun::launch
