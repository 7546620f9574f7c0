#pragma once

#include <string>

#include "errors.hpp"

namespace trainrun::launch {

// The log directory tree, as torchrun lays it out:
//   <base>/<run id>_<suffix>/attempt_<k>/<local rank>/{stdout.log,stderr.log,error.json}
// `base` is --log-dir, or a fresh directory under $TMPDIR (default /tmp) when none was given;
// when only error files will be written there (no --redirects/--tee/filter) and TMPDIR is unset,
// under /dev/shm.
class LogDir {
 public:
  // Throws SetupError naming the directory when it cannot be created.
  static LogDir create(const std::string& base, const std::string& run_id, bool small_files_only);

  std::string run_dir() const { return run_dir_; }
  std::string rank_dir(int attempt, int local_rank) const;
  // Creates the rank directory (and its parents); throws when it cannot.
  std::string make_rank_dir(int attempt, int local_rank) const;
  // A temporary base that holds no file at all is removed, so a clean run leaves nothing behind.
  void remove_if_empty() const;
  // What remove_if_empty() removes: the temporary base, or the run directory under --log-dir.
  std::string own_root() const { return temporary_ ? base_ : run_dir_; }

 private:
  std::string base_;
  std::string run_dir_;
  bool temporary_ = false;
};

}  // namespace trainrun::launch
