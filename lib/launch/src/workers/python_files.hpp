#pragma once

#include <string_view>
#include <vector>

namespace trainrun::launch {

// The files of src/workers/python/: the Python that runs in a worker's interpreter or in the
// --preload template, kept in the binary (which needs no file beside it). CMake embeds them at
// build time (cmake/embed_files.cmake) and again whenever one changes.
struct EmbeddedFile {
  std::string_view name;  // "template.py"
  std::string_view text;
};
const std::vector<EmbeddedFile>& python_files();
// The file of that name; std::logic_error for a name the build does not embed.
std::string_view python_file(std::string_view name);

}  // namespace trainrun::launch
