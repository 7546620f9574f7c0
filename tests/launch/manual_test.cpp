#include "trainrun/launch/core/manual.hpp"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "test_support.hpp"
#include "trainrun/launch/cli/cli_docs.hpp"

using namespace trainrun::launch;

namespace {

void write(const std::string& path, const std::string& text = "", mode_t mode = 0644) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

void make_dirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1))
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  ::mkdir(path.c_str(), 0755);
}

}  // namespace

TEST_CASE("the manual is what is installed beside the binary", "[manual]") {
  const std::string prefix = trainrun::test::make_temp_dir("manual");
  make_dirs(prefix + "/bin");
  make_dirs(prefix + "/tools");
  write(prefix + "/tools/man", "#!/bin/sh\n", 0755);
  const std::string exe = prefix + "/bin/trainrun";
  const std::string path = prefix + "/tools";

  // A bare binary: nothing to point to but how to write an error file.
  InstalledManual bare = find_manual(exe, path);
  CHECK_FALSE(bare.man_page);
  CHECK(bare.guides.empty());
  CHECK(error_file_hint(bare) ==
        "To enable traceback: decorate the worker's main function with @record "
        "(torch.distributed.elastic.multiprocessing.errors), or write the JSON file named in "
        "TORCHELASTIC_ERROR_FILE");
  CHECK_FALSE(manual_line(bare));

  // The guides alone (a man page that no `man` on PATH can show is no help).
  make_dirs(prefix + "/share/doc/trainrun");
  write(prefix + "/share/doc/trainrun/cli.md");
  make_dirs(prefix + "/share/man/man1");
  write(prefix + "/share/man/man1/trainrun.1.gz");
  const InstalledManual guides = find_manual(exe, prefix + "/nothing");
  CHECK_FALSE(guides.man_page);
  CHECK(guides.guides == prefix + "/share/doc/trainrun");
  CHECK(error_file_hint(guides) == "To enable traceback see: " + prefix +
                                       "/share/doc/trainrun/cli.md, section \"Error files\"");
  CHECK(*manual_line(guides) == "The manual: " + prefix +
                                    "/share/doc/trainrun/cli.md (environment, error files, exit "
                                    "status).");

  // The man page (compressed, as packages install it), and `man` to show it.
  const InstalledManual man = find_manual(exe, path);
  CHECK(man.man_page);
  CHECK(error_file_hint(man) == "To enable traceback see: man trainrun, section ERROR FILES");
  CHECK(*manual_line(man) == "The manual: man trainrun (environment, error files, exit status).");
}

TEST_CASE("--help-all ends with the installed manual, and says nothing of one not installed",
          "[manual]") {
  const std::string with = help_text(true, 100, std::string("The manual: man trainrun."));
  CHECK(with.substr(with.size() - 27) == "\nThe manual: man trainrun.\n");
  const std::string without = help_text(true, 100);
  CHECK(without.find("man trainrun") == std::string::npos);
  CHECK(without.find("The manual") == std::string::npos);
}
