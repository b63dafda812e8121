# cudalloc_gpu_check(): registers one GPU check with CTest (tests/python and tests/gpu use it;
# scripts/gpu_check.sh runs them with `ctest -L gpu`).
#
#   cudalloc_gpu_check(NAME STEP step TIMEOUT seconds [LABELS label...] [OPTIONS opt...]
#                      [ENVIRONMENT VAR=value...] [DEPENDS test...] COMMAND command args...)
#
# The command runs through tests/python/gpu_step.py with OPTIONS (--gpus, --modules, --needs,
# --fresh, --preload): in $OUT (default: BUILD/gpu-check-out), skipped (77) where it cannot
# run. Labels: gpu, the step (the group scripts/gpu_check.sh's GPU_STEPS selects) and LABELS.
# Environment: CUDALLOC_LIBRARY (the built libcudalloc.so), this tree's tools/python first on
# PYTHONPATH, and ENVIRONMENT. Each directory that registers checks includes this file (its
# variables are per directory).

# The Python tests run `python3` from PATH at test time rather than the interpreter found at
# configure time, so a build tree carried to another machine uses that machine's python3
# (the one with torch).
set(CUDALLOC_TEST_PYTHON python3 CACHE STRING "Python interpreter of the Python tests")
set(CUDALLOC_GPU_STEP ${CMAKE_CURRENT_LIST_DIR}/gpu_step.py)
set(CUDALLOC_GPU_OUT ${PROJECT_BINARY_DIR}/gpu-check-out)

function(cudalloc_gpu_check name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "STEP;TIMEOUT"
                        "LABELS;OPTIONS;ENVIRONMENT;DEPENDS;COMMAND")
  if(NOT arg_STEP OR NOT arg_TIMEOUT OR NOT arg_COMMAND)
    message(FATAL_ERROR "cudalloc_gpu_check(${name}): STEP, TIMEOUT and COMMAND are required")
  endif()
  add_test(NAME ${name} COMMAND ${CUDALLOC_TEST_PYTHON} ${CUDALLOC_GPU_STEP} ${CUDALLOC_GPU_OUT}
           ${arg_OPTIONS} -- ${arg_COMMAND})
  set(labels gpu ${arg_STEP} ${arg_LABELS})
  list(REMOVE_DUPLICATES labels)
  set(environment CUDALLOC_LIBRARY=$<TARGET_FILE:cudalloc> ${arg_ENVIRONMENT})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${arg_TIMEOUT}
    SKIP_RETURN_CODE 77 ENVIRONMENT "${environment}"
    ENVIRONMENT_MODIFICATION "PYTHONPATH=path_list_prepend:${PROJECT_SOURCE_DIR}/tools/python")
  if(arg_DEPENDS)
    set_tests_properties(${name} PROPERTIES DEPENDS "${arg_DEPENDS}")
  endif()
endfunction()
