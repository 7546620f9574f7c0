#include "python_bootstrap.hpp"

#include <fmt/format.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "python_files.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace trainrun::launch {

namespace {

constexpr std::string_view kPythonPathEntry = "PYTHONPATH=";
constexpr std::string_view kBootstrapEntry = "TRAINRUN_BOOTSTRAP=";

std::string bootstrap_root() {
  const char* tmp = std::getenv("TMPDIR");
  std::string root = tmp && *tmp ? tmp : "/tmp";
  if (root[0] != '/') {
    // On PYTHONPATH a relative directory is the worker's working directory's.
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) root = std::string(cwd) + "/" + root;
  }
  return root;
}

}  // namespace

PythonBootstrap::PythonBootstrap() {
  const std::string root = bootstrap_root();
  std::string templ = root + "/trainrun-python-XXXXXX";
  if (!::mkdtemp(templ.data()))
    throw SetupError(fmt::format("cannot create a directory for the workers' Python under {}: {}",
                                 root, std::strerror(errno)));
  dir_ = templ;
  try {
    // A colon would split it in two on PYTHONPATH.
    if (dir_.find(':') != std::string::npos)
      throw SetupError(fmt::format("{}: a directory on PYTHONPATH cannot hold ':'", dir_));
    for (const EmbeddedFile& file : python_files())
      write_file_atomically(dir_ + "/" + std::string(file.name), std::string(file.text), false);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw;
  }
}

PythonBootstrap::~PythonBootstrap() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::vector<std::string> bootstrap_environment(std::vector<std::string> env, const std::string& dir,
                                               nlohmann::json settings) {
  std::optional<std::string> user;
  for (auto it = env.begin(); it != env.end();) {
    if (it->compare(0, kPythonPathEntry.size(), kPythonPathEntry) == 0) {
      user = it->substr(kPythonPathEntry.size());
      it = env.erase(it);
    } else if (it->compare(0, kBootstrapEntry.size(), kBootstrapEntry) == 0) {
      it = env.erase(it);
    } else {
      ++it;
    }
  }
  // An empty entry on PYTHONPATH is the working directory: "DIR:" for an empty one would add it.
  settings["pythonpath"] = !user ? "unset" : user->empty() ? "empty" : "after";
  env.push_back(std::string(kPythonPathEntry) + dir + (user && !user->empty() ? ":" + *user : ""));
  env.push_back(std::string(kBootstrapEntry) + settings.dump());
  return env;
}

}  // namespace trainrun::launch
