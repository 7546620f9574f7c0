#include "trainrun/launch/core/manual.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "trainrun/base/process.hpp"
#include "trainrun/base/system.hpp"

namespace trainrun::launch {

namespace {

std::string parent(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

}  // namespace

InstalledManual find_manual(const std::string& exe, const std::string& path) {
  InstalledManual manual;
  if (exe.empty()) return manual;
  const std::string prefix = parent(parent(exe));
  const std::string page = prefix + "/share/man/man1/trainrun.1";
  // A page that no `man` can show (a container without man-db) is no help.
  manual.man_page = (readable(page) || readable(page + ".gz")) && find_program("man", path);
  const std::string guides = prefix + "/share/doc/trainrun";
  if (readable(guides + "/cli.md")) manual.guides = guides;
  return manual;
}

const InstalledManual& installed_manual() {
  static const InstalledManual manual = [] {
    const char* path = std::getenv("PATH");
    return find_manual(self_exe(), path ? path : "/bin:/usr/bin");
  }();
  return manual;
}

std::string error_file_hint(const InstalledManual& manual) {
  if (manual.man_page) return "To enable traceback see: man trainrun, section ERROR FILES";
  if (!manual.guides.empty())
    return fmt::format("To enable traceback see: {}/cli.md, section \"Error files\"",
                       manual.guides);
  return "To enable traceback: decorate the worker's main function with @record "
         "(torch.distributed.elastic.multiprocessing.errors), or write the JSON file named in "
         "TORCHELASTIC_ERROR_FILE";
}

std::optional<std::string> manual_line(const InstalledManual& manual) {
  if (manual.man_page) return "The manual: man trainrun (environment, error files, exit status).";
  if (!manual.guides.empty())
    return fmt::format("The manual: {}/cli.md (environment, error files, exit status).",
                       manual.guides);
  return std::nullopt;
}

}  // namespace trainrun::launch
