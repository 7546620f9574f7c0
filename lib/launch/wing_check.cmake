# trainrun_check_wing_includes(DIR): fails (FATAL_ERROR, one line naming the file, the include
# and the rule) unless every quoted include of every wing's file under DIR (lib/launch) is one of:
# a header of its own wing, public by its full path ("trainrun/launch/<wing>/<name>.hpp") or
# private by its bare name from the wing's src/ (never a relative path); a public header of a wing
# or library its arrows in wings.cmake allow (lib/base for every wing); the generated version
# header. A bare name alone could find another library's header of the same name (lib/runtime has
# errors.hpp too), so it is only ever a private header of the wing itself.
# `cmake -DLAUNCH_DIR=DIR -P wing_check.cmake` runs the check alone (tests/docs/wings_test.cmake).
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_policy(VERSION 3.16)  # IN_LIST, as in the project
endif()
include(${CMAKE_CURRENT_LIST_DIR}/wings.cmake)

function(trainrun_check_wing_includes dir)
  set(depends CONFIGURE_DEPENDS)  # a new file checked at the next build; not a script's option
  if(CMAKE_SCRIPT_MODE_FILE)
    set(depends)
  endif()
  foreach(wing IN LISTS TRAINRUN_LAUNCH_WINGS)
    file(GLOB wing_files ${depends} ${dir}/include/trainrun/launch/${wing}/*
      ${dir}/src/${wing}/*)
    set(allowed ${wing} base ${TRAINRUN_WING_USES_${wing}})
    foreach(file IN LISTS wing_files)
      file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
      foreach(line IN LISTS includes)
        string(REGEX MATCH "\"([^\"]*)\"" _ "${line}")
        set(path "${CMAKE_MATCH_1}")
        set(ok FALSE)
        if(path MATCHES "^trainrun/launch/([a-z]+)/[a-z0-9_]+\\.hpp$")
          set(used ${CMAKE_MATCH_1})
          if(used IN_LIST allowed AND EXISTS ${dir}/include/${path})
            set(ok TRUE)
          elseif(used IN_LIST allowed)
            set(why "no public header of that name (a private one is included by its bare name, and only in its own wing)")
          else()
            set(why "wing ${wing} may not use wing ${used} (lib/launch/wings.cmake)")
          endif()
        elseif(path MATCHES "^trainrun/(base|rendezvous|stacks)/[a-z0-9_]+\\.hpp$")
          if(CMAKE_MATCH_1 IN_LIST allowed)
            set(ok TRUE)
          else()
            set(why "wing ${wing} may not use lib/${CMAKE_MATCH_1} (lib/launch/wings.cmake)")
          endif()
        elseif(path STREQUAL "trainrun/launch/version.hpp")
          set(ok TRUE)
        elseif(path MATCHES "^[a-z0-9_]+\\.hpp$")
          if(file MATCHES "/src/${wing}/[^/]*$" AND EXISTS ${dir}/src/${wing}/${path})
            set(ok TRUE)
          else()
            set(why "a bare name is a private header of the including file's own src/${wing}/")
          endif()
        else()
          set(why "include a header by its full path (\"trainrun/launch/<wing>/<name>.hpp\", \"trainrun/base/...\") or a private one of the same wing by its bare name")
        endif()
        if(NOT ok)
          message(FATAL_ERROR "${file}: ${line}: ${why}")
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED LAUNCH_DIR)
  trainrun_check_wing_includes(${LAUNCH_DIR})
endif()
