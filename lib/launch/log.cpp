#include "log.hpp"

#include "file_io.hpp"
#include "trainrun/base/text.hpp"

namespace trainrun::launch {

std::string launcher_line(std::string_view line) {
  std::string text = "trainrun: ";
  // One line, whatever it quotes: host names and reasons from other nodes, paths, worker text.
  text += escape_control(line);
  text += '\n';
  return text;
}

void say(std::string_view line) {
  const std::string text = launcher_line(line);
  write_all(2, text.data(), text.size());
}

}  // namespace trainrun::launch
