#include <system_error>
#include <trainrun/runtime/checkpoint.hpp>
#include <trainrun/runtime/errors.hpp>
#include <utility>

namespace trainrun::runtime {

Checkpoint Checkpoint::from_directory(std::filesystem::path directory) {
  if (directory.empty()) {
    throw ConfigError(
        "Checkpoint::from_directory: the path is empty; pass the directory that "
        "holds the checkpoint's files");
  }
  return Checkpoint(std::move(directory));
}

std::filesystem::path Checkpoint::to_directory(const std::filesystem::path& destination) const {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(destination, error);
  if (!error) {
    fs::copy(path_, destination, fs::copy_options::recursive | fs::copy_options::overwrite_existing,
             error);
  }
  if (error) {
    throw RuntimeError("Checkpoint::to_directory: cannot copy " + path_.string() + " to " +
                       destination.string() + ": " + error.message());
  }
  return destination;
}

}  // namespace trainrun::runtime
