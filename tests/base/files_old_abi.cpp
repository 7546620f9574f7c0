// files.hpp compiled with the old C++ string ABI (_GLIBCXX_USE_CXX11_ABI=0, as the runtime is
// against such a LibTorch); nothing of std::string crosses to the test, which uses the new one.

#include <cstddef>

#include "files_old_abi.hpp"
#include "trainrun/base/files.hpp"

static_assert(!_GLIBCXX_USE_CXX11_ABI, "this file is compiled with the old string ABI");

namespace old_abi {

long file_size(const char* path) {
  const auto text = trainrun::read_file(path);
  return text ? static_cast<long>(text->size()) : -1;
}

std::size_t self_exe_length() { return trainrun::self_exe().size(); }

}  // namespace old_abi
