#include "python_files.hpp"

#include <stdexcept>
#include <string>

namespace trainrun::launch {

std::string_view python_file(std::string_view name) {
  for (const EmbeddedFile& file : python_files())
    if (file.name == name) return file.text;
  throw std::logic_error("no embedded Python file " + std::string(name));
}

}  // namespace trainrun::launch
