# FUTR_SANITIZE=ON: every host C++ translation unit and every executable is
# built with AddressSanitizer + UndefinedBehaviorSanitizer (any error aborts:
# -fno-sanitize-recover=all). CUDA device code is not instrumented; the host
# side of .cu files is compiled by nvcc's host compiler without sanitizers and
# linked against the ASan runtime, which is supported.
#
#   scripts/test-sanitize.sh     # configures build-asan/ (clang), builds, runs the CPU suite
#                                # and the fuzz smoke run (ctest -L fuzz)
#
# With clang the fuzz targets are built too (FUTR_BUILD_FUZZ is implied) and
# each gets a ctest smoke run over its committed corpus; see fuzz/README.md.
# docs/RELIABILITY.md states what the sanitizer suite covers.
option(FUTR_SANITIZE "Build everything with ASan + UBSan (CPU test suite under sanitizers)" OFF)
if(FUTR_SANITIZE)
  set(FUTR_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${FUTR_SANITIZE_FLAGS}>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:-fsanitize=address,undefined>")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(FUTR_BUILD_FUZZ ON CACHE BOOL "Build libFuzzer targets (needs clang)" FORCE)
  endif()
endif()
