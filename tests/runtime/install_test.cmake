# Installs the build tree into a fresh prefix, builds install_consumer against it with
# find_package(trainrun), and runs the result. -D BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, and
# CONSUMER_ARGS (cache settings for the consumer) and CONSUMER_PREFIX_PATH (where this build found
# LibTorch, searched after the install prefix), each separated by |.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "install test: `${command}` failed (${code}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
foreach(expected include/trainrun/runtime/runtime.hpp include/trainrun/runtime/trainer.hpp
                 lib/cmake/trainrun/trainrun-config.cmake bin/trainrun share/man/man1/trainrun.1
                 share/bash-completion/completions/trainrun)
  if(NOT EXISTS "${WORK_DIR}/prefix/${expected}")
    message(FATAL_ERROR "install test: ${expected} was not installed")
  endif()
endforeach()
file(GLOB libraries "${WORK_DIR}/prefix/lib*/libtrainrun_runtime.so*")
if(NOT libraries)
  message(FATAL_ERROR "install test: libtrainrun_runtime.so was not installed")
endif()

string(REPLACE "|" ";" consumer_args "${CONSUMER_ARGS}")
# The environment's CMAKE_PREFIX_PATH (":"-separated) is searched after the cache variable's.
string(REPLACE "|" ":" torch_prefix_path "${CONSUMER_PREFIX_PATH}")
step(${CMAKE_COMMAND} -E env "CMAKE_PREFIX_PATH=${torch_prefix_path}"
     ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
     "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release ${consumer_args})
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${WORK_DIR}/build/consumer" "${WORK_DIR}/results")
message(STATUS "${step_output}")
if(NOT step_output MATCHES "consumer ok")
  message(FATAL_ERROR "install test: the consumer did not report success:\n${step_output}")
endif()
if(NOT EXISTS "${WORK_DIR}/results/consumer/metrics.jsonl")
  message(FATAL_ERROR "install test: the consumer's metrics.jsonl is missing")
endif()
