#pragma once

#include <optional>
#include <string>

namespace trainrun::launch {

// The documentation installed with a trainrun binary, under the prefix of <prefix>/bin/trainrun
// (cmake --install, the .deb and the wheel put it there; a bare binary has none).
struct InstalledManual {
  bool man_page = false;  // <prefix>/share/man/man1/trainrun.1[.gz], with `man` on PATH
  std::string guides;     // <prefix>/share/doc/trainrun when it holds cli.md, else ""
};

// What is installed beside the binary `exe`, `path` being where `man` is looked for.
InstalledManual find_manual(const std::string& exe, const std::string& path);
// This binary's, looked up once.
const InstalledManual& installed_manual();

// The failure summary's traceback of a worker that wrote no error file: where this machine
// describes error files, else how to write one. Pure.
std::string error_file_hint(const InstalledManual& manual);
// The last line of `trainrun --help-all`; nothing when no manual is installed. Pure.
std::optional<std::string> manual_line(const InstalledManual& manual);

}  // namespace trainrun::launch
