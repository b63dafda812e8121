# Compiler flags of the fuzzing build (CUDALLOC_FUZZ=ON), included by the top-level
# CMakeLists.txt before any target is defined, so that the allocator itself is instrumented:
# libFuzzer's coverage feedback and AddressSanitizer/UndefinedBehaviorSanitizer reach every
# object, not only the fuzz targets. The targets themselves link with -fsanitize=fuzzer
# (tests/fuzz/CMakeLists.txt).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "CUDALLOC_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++ "
                      "-DCMAKE_C_COMPILER=clang")
endif()
if(CUDALLOC_SANITIZE)
  message(FATAL_ERROR "CUDALLOC_FUZZ sets its own sanitizers; leave CUDALLOC_SANITIZE empty")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                    -fno-sanitize-recover=all)
add_link_options(-fsanitize=address,undefined)
