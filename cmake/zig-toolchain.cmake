# Builds with zig's clang (the `ziglang` wheel, or any zig) for an old glibc, with libc++ and
# libunwind linked statically: the binary runs on every Linux whose glibc is at least
# TRAINRUN_ZIG_GLIBC. pyproject.toml uses it for the wheel; by hand:
#   pip install ziglang && cmake -S . -B build-zig --toolchain cmake/zig-toolchain.cmake \
#     -DTRAINRUN_STATIC_DEPS=ON -DTRAINRUN_BUILD_RUNTIME=OFF -DTRAINRUN_BUILD_TESTS=OFF
# zig sees only its own C and C++ headers: the dependencies' headers (Boost, fmt, CLI11,
# nlohmann-json, OpenSSL) come from TRAINRUN_ZIG_SYSTEM_INCLUDE_DIRS, searched after zig's.

# TRAINRUN_ZIG_ARCH=aarch64 on an x86_64 machine (or the reverse) cross-builds: zig brings the
# other architecture's C library and libc++, Debian's multiarch packages (libssl-dev:arm64) the
# dependencies' libcrypto.a; pyproject.toml's TRAINRUN_WHEEL_ARCH sets it for the wheel.

# CMake reads this file again for each try_compile: what it decided travels in these.
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TRAINRUN_ZIG_WRAPPERS TRAINRUN_ZIG_SYSTEM_INCLUDE_DIRS
  CMAKE_LIBRARY_ARCHITECTURE TRAINRUN_ZIG_ARCH)

set(TRAINRUN_ZIG_ARCH "${CMAKE_HOST_SYSTEM_PROCESSOR}" CACHE STRING
  "The machine the binary runs on: x86_64 or aarch64")
if(NOT TRAINRUN_ZIG_ARCH MATCHES "^(x86_64|aarch64)$")
  message(FATAL_ERROR " trainrun: TRAINRUN_ZIG_ARCH=${TRAINRUN_ZIG_ARCH}: use x86_64 or aarch64")
endif()
set(CMAKE_SYSTEM_PROCESSOR ${TRAINRUN_ZIG_ARCH})
if(NOT TRAINRUN_ZIG_ARCH STREQUAL CMAKE_HOST_SYSTEM_PROCESSOR)
  set(CMAKE_SYSTEM_NAME Linux)  # makes CMAKE_CROSSCOMPILING true
  # pkg-config would hand FindOpenSSL this machine's libcrypto: only the target's may be found.
  set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${TRAINRUN_ZIG_ARCH}-linux-gnu/pkgconfig")
  # The header-only dependencies' CMake files (fmt, Boost, CLI11) are this machine's: they name
  # headers, the same for every architecture, and no library of theirs is linked.
  list(APPEND CMAKE_PREFIX_PATH "/usr/lib/${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu/cmake")
  # The man page and the completion are written by trainrun_docgen, a program of the target's
  # architecture: qemu's user mode runs it (and the tests run trainrun under it).
  find_program(TRAINRUN_ZIG_EMULATOR NAMES qemu-${TRAINRUN_ZIG_ARCH}-static qemu-${TRAINRUN_ZIG_ARCH})
  if(NOT TRAINRUN_ZIG_EMULATOR)
    message(FATAL_ERROR " trainrun: qemu-${TRAINRUN_ZIG_ARCH} not found: install qemu-user-static "
      "(Debian/Ubuntu) or qemu-user (RHEL-like), which runs the ${TRAINRUN_ZIG_ARCH} program that "
      "writes the man page, or set TRAINRUN_ZIG_EMULATOR")
  endif()
  set(CMAKE_CROSSCOMPILING_EMULATOR "${TRAINRUN_ZIG_EMULATOR}")
endif()
set(TRAINRUN_ZIG_GLIBC "2.28" CACHE STRING "The oldest glibc the binary runs with")
set(_zig_target "${CMAKE_SYSTEM_PROCESSOR}-linux-gnu.${TRAINRUN_ZIG_GLIBC}")

if(NOT TRAINRUN_ZIG_WRAPPERS)
  set(TRAINRUN_ZIG "$ENV{TRAINRUN_ZIG}" CACHE FILEPATH "The zig executable (default: ziglang's)")
  if(NOT TRAINRUN_ZIG)
    # scikit-build-core names the Python of the build environment, where ziglang is installed.
    foreach(python IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}" python3)
      if(python)
        execute_process(COMMAND ${python} -c
          "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))"
          OUTPUT_VARIABLE _zig OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
        if(_rc EQUAL 0 AND EXISTS "${_zig}")
          set(TRAINRUN_ZIG "${_zig}" CACHE FILEPATH "The zig executable" FORCE)
          break()
        endif()
      endif()
    endforeach()
  endif()
  if(NOT TRAINRUN_ZIG)
    find_program(TRAINRUN_ZIG zig)
  endif()
  if(NOT TRAINRUN_ZIG)
    # One line: CMake wraps an error's text unless it starts with a space.
    message(FATAL_ERROR " trainrun: zig not found: `pip install ziglang` (or set TRAINRUN_ZIG to "
      "a zig executable)")
  endif()
  execute_process(COMMAND "${TRAINRUN_ZIG}" version OUTPUT_VARIABLE _zig_version
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(TRAINRUN_ZIG_ID "zig-${_zig_version}-${_zig_target}" CACHE INTERNAL "")
  # Small scripts stand in for the compiler and archiver, as CMake wants one path for each.
  set(TRAINRUN_ZIG_WRAPPERS "${CMAKE_BINARY_DIR}/zig" CACHE INTERNAL "")
  foreach(tool IN ITEMS c++ cc ar ranlib)
    set(_args "${tool}")
    if(tool STREQUAL "c++" OR tool STREQUAL "cc")
      set(_args "${tool} -target ${_zig_target}")
    endif()
    file(WRITE "${TRAINRUN_ZIG_WRAPPERS}/${tool}.tmp" "#!/bin/sh\nexec \"${TRAINRUN_ZIG}\" ${_args} \"$@\"\n")
    file(CHMOD "${TRAINRUN_ZIG_WRAPPERS}/${tool}.tmp" PERMISSIONS OWNER_READ OWNER_WRITE
      OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    # Rewritten only when it changes, so that a rebuild does not see a new compiler.
    file(COPY_FILE "${TRAINRUN_ZIG_WRAPPERS}/${tool}.tmp" "${TRAINRUN_ZIG_WRAPPERS}/zig-${tool}"
      ONLY_IF_DIFFERENT)
    file(REMOVE "${TRAINRUN_ZIG_WRAPPERS}/${tool}.tmp")
  endforeach()

  # Debian and Ubuntu keep some headers (OpenSSL's configuration) under a multiarch directory.
  set(_multiarch "${CMAKE_SYSTEM_PROCESSOR}-linux-gnu")
  if(NOT CMAKE_LIBRARY_ARCHITECTURE AND IS_DIRECTORY "/usr/lib/${_multiarch}")
    set(CMAKE_LIBRARY_ARCHITECTURE "${_multiarch}" CACHE STRING "" FORCE)
  endif()
  set(TRAINRUN_ZIG_SYSTEM_INCLUDE_DIRS "/usr/local/include;/usr/include/${_multiarch};/usr/include"
    CACHE STRING "Where the dependencies' headers are, searched after zig's own")
endif()

# CMake identifies the compiler and runs its checks without linking: a program linked by zig has
# zig build libc++ and the C library's stubs first, for those steps' flags rather than the
# build's (two minutes of one core at every first configure on a machine, for a runtime nothing
# links). With a compiler target named, CMake's identification compiles with -c first.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_C_COMPILER_TARGET "${_zig_target}")
set(CMAKE_CXX_COMPILER_TARGET "${_zig_target}")

set(CMAKE_C_COMPILER "${TRAINRUN_ZIG_WRAPPERS}/zig-cc")
set(CMAKE_CXX_COMPILER "${TRAINRUN_ZIG_WRAPPERS}/zig-c++")
set(CMAKE_AR "${TRAINRUN_ZIG_WRAPPERS}/zig-ar" CACHE FILEPATH "" FORCE)
set(CMAKE_RANLIB "${TRAINRUN_ZIG_WRAPPERS}/zig-ranlib" CACHE FILEPATH "" FORCE)
foreach(dir IN LISTS TRAINRUN_ZIG_SYSTEM_INCLUDE_DIRS)
  string(APPEND CMAKE_CXX_FLAGS_INIT " -idirafter ${dir}")
  string(APPEND CMAKE_C_FLAGS_INIT " -idirafter ${dir}")
endforeach()
