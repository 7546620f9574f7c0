#pragma once

#include <cstddef>

// lib/base's files.hpp as a translation unit of the old string ABI reads (files_old_abi.cpp).
namespace old_abi {
// The bytes of `path` read whole, -1 when it cannot be opened.
long file_size(const char* path);
// The length of this program's executable's path.
std::size_t self_exe_length();
}  // namespace old_abi
