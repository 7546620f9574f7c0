# cmake -DSOURCE_DIR=<repository> -DWORK_DIR=<scratch directory> -P wings_test.cmake
#
# 1. docs/architecture.md draws the launcher's wings with the arrows lib/launch/wings.cmake
#    allows: the same wings, each with the same wings and libraries it may use.
# 2. The configure step's wall (lib/launch/wing_check.cmake) refuses each kind of include that
#    breaks it, in a small tree of wings written here, and passes the same tree without it.
cmake_policy(VERSION 3.16)
include(${SOURCE_DIR}/lib/launch/wings.cmake)

# --- 1. The picture in docs/architecture.md: the code block that starts with "lib/launch/".
file(STRINGS ${SOURCE_DIR}/docs/architecture.md doc_lines ENCODING UTF-8)
set(in_block FALSE)
set(drawn)
foreach(line IN LISTS doc_lines)
  if(line MATCHES "^lib/launch/")
    set(in_block TRUE)
  elseif(in_block AND line MATCHES "^```")
    break()
  elseif(in_block AND line MATCHES "^  ([a-z]+)/ ")
    set(wing ${CMAKE_MATCH_1})
    list(APPEND drawn ${wing})
    set(uses)
    if(line MATCHES "→ (.*)$")
      string(REPLACE ", " ";" arrows "${CMAKE_MATCH_1}")
      foreach(arrow IN LISTS arrows)
        string(STRIP "${arrow}" arrow)
        string(REGEX REPLACE "^lib/" "" arrow "${arrow}")
        list(APPEND uses ${arrow})
      endforeach()
    endif()
    set(want ${TRAINRUN_WING_USES_${wing}})
    list(SORT uses)
    list(SORT want)
    if(NOT uses STREQUAL want)
      message(FATAL_ERROR "docs/architecture.md draws ${wing} → '${uses}'; "
        "lib/launch/wings.cmake allows '${want}'")
    endif()
  endif()
endforeach()
set(table ${TRAINRUN_LAUNCH_WINGS})
list(SORT drawn)
list(SORT table)
if(NOT drawn STREQUAL table)
  message(FATAL_ERROR "docs/architecture.md draws the wings '${drawn}'; "
    "lib/launch/wings.cmake has '${table}'")
endif()

# --- 2. The wall, on a tree of its own: store and workers, with one public and one private
# header each.
set(tree ${WORK_DIR}/wings_tree)
function(write_tree extra_file extra_include)
  file(REMOVE_RECURSE ${tree})
  foreach(wing IN LISTS TRAINRUN_LAUNCH_WINGS)
    file(MAKE_DIRECTORY ${tree}/src/${wing} ${tree}/include/trainrun/launch/${wing})
  endforeach()
  file(WRITE ${tree}/include/trainrun/launch/workers/supervisor.hpp "#pragma once\n")
  file(WRITE ${tree}/src/workers/spawn.hpp "#pragma once\n")
  file(WRITE ${tree}/include/trainrun/launch/agent/agent.hpp "#pragma once\n")
  file(WRITE ${tree}/src/workers/supervisor.cpp
    "#include \"trainrun/launch/workers/supervisor.hpp\"\n#include \"spawn.hpp\"\n"
    "#include \"trainrun/launch/core/log.hpp\"\n#include <vector>\n")
  file(WRITE ${tree}/include/trainrun/launch/core/log.hpp "#pragma once\n")
  file(WRITE ${tree}/src/agent/agent.cpp
    "#include \"trainrun/launch/workers/supervisor.hpp\"\n#include \"trainrun/base/process.hpp\"\n")
  if(extra_file)
    file(WRITE ${tree}/${extra_file} "#include \"${extra_include}\"\n")
  endif()
endfunction()

function(expect_check extra_file extra_include expected)
  write_tree("${extra_file}" "${extra_include}")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DLAUNCH_DIR=${tree} -P ${SOURCE_DIR}/lib/launch/wing_check.cmake
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " err "${err}")  # CMake wraps its messages
  if(expected STREQUAL "")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "the wall refused a tree that keeps it: ${err}")
    endif()
  elseif(rc EQUAL 0)
    message(FATAL_ERROR "the wall let '${extra_file}' include \"${extra_include}\"")
  elseif(NOT err MATCHES "${expected}")
    message(FATAL_ERROR "'${extra_file}' including \"${extra_include}\": expected '${expected}', "
      "got: ${err}")
  endif()
endfunction()

expect_check("" "" "")
# An arrow the table does not have.
expect_check(src/store/store_server.cpp trainrun/launch/agent/agent.hpp
  "wing store may not use wing agent")
expect_check(src/store/store_server.cpp trainrun/stacks/collect.hpp
  "wing store may not use lib/stacks")
# Another wing's private header, by its bare name, by a public-looking path, by a relative one.
expect_check(src/agent/agent_workers.cpp spawn.hpp "a bare name is a private header")
expect_check(src/agent/agent_workers.cpp trainrun/launch/workers/spawn.hpp
  "no public header of that name")
expect_check(src/agent/agent_workers.cpp ../workers/spawn.hpp "include a header by its full path")
# A public header may not reach a private one by its bare name either.
expect_check(include/trainrun/launch/workers/group.hpp spawn.hpp
  "a bare name is a private header")
file(REMOVE_RECURSE ${tree})
message(STATUS "the wings drawn in docs/architecture.md are those of lib/launch/wings.cmake; "
  "the wall refuses each kind of include that breaks it")
