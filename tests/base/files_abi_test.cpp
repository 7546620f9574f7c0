#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "files_old_abi.hpp"
#include "trainrun/base/system.hpp"

static_assert(_GLIBCXX_USE_CXX11_ABI, "this file is compiled with the new string ABI");

TEST_CASE("files.hpp reads alike in a program whose parts use either string ABI", "[base]") {
  const std::string path = "/tmp/trainrun_files_abi_" + trainrun::random_hex(8);
  const std::string text(100000, 'x');
  {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  CHECK(old_abi::file_size(path.c_str()) == static_cast<long>(text.size()));
  CHECK(trainrun::read_file(path) == text);
  std::remove(path.c_str());
  CHECK(old_abi::file_size(path.c_str()) == -1);
  CHECK_FALSE(trainrun::read_file(path));
  CHECK(old_abi::self_exe_length() == trainrun::self_exe().size());
  CHECK(trainrun::self_exe().size() > 0);
}
