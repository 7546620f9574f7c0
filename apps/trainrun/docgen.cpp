// Build-time generator of the man page and the bash completion, from the same option table as
// `trainrun --help`: trainrun_docgen man|bash OUTPUT.
#include <cstdio>
#include <exception>
#include <string>

#include "trainrun/launch/cli/cli_docs.hpp"
#include "trainrun/launch/core/file_io.hpp"

namespace launch = trainrun::launch;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fputs("usage: trainrun_docgen man|bash OUTPUT\n", stderr);
    return 2;
  }
  try {
    const std::string what = argv[1];
    const std::string text =
        what == "man" ? launch::manual_page() : launch::completion_script(what, what);
    launch::write_file_atomically(argv[2], text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrun_docgen: %s\n", e.what());
    return 1;
  }
  return 0;
}
