#pragma once

#include <cstddef>
#include <string>

#include "trainrun/launch/core/errors.hpp"

namespace trainrun::launch {

// The name of a run's directory in the log tree, `<name>_<suffix>`, for a run id of any bytes:
// [A-Za-z0-9._-] kept, every other byte as %XX, so no id can name another directory ("../x",
// "team/job7"); an encoding over kMaxRunDirName bytes becomes its head, "-" and 16 hex digits of
// the id's SHA-256, so no id is too long for a file name. The run id itself is unchanged
// everywhere else (TORCHELASTIC_RUN_ID, the rendezvous).
inline constexpr std::size_t kMaxRunDirName = 100;
std::string run_dir_name(const std::string& run_id);

// The log directory tree, as torchrun lays it out:
//   <base>/<run_dir_name(run id)>_<suffix>/attempt_<k>/<local
//   rank>/{stdout.log,stderr.log,error.json}
// `base` is --log-dir, or a fresh directory under $TMPDIR (default /tmp) when none was given.
class LogDir {
 public:
  // Throws SetupError naming the directory when it cannot be created.
  static LogDir create(const std::string& base, const std::string& run_id);

  std::string run_dir() const { return run_dir_; }
  std::string rank_dir(int attempt, int local_rank) const;
  // Creates the rank directory (and its parents); throws when it cannot.
  std::string make_rank_dir(int attempt, int local_rank) const;
  // A temporary base that holds no file at all is removed, so a clean run leaves nothing behind.
  void remove_if_empty() const;
  // What remove_if_empty() removes: the temporary base, or the run directory under --log-dir.
  std::string own_root() const { return temporary_ ? base_ : run_dir_; }
  // No --log-dir was given: the base is a fresh directory of trainrun's own.
  bool temporary() const { return temporary_; }

 private:
  std::string base_;
  std::string run_dir_;
  bool temporary_ = false;
};

}  // namespace trainrun::launch
