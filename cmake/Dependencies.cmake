# Third-party dependencies, all from Debian packages (scripts/install-deps.sh).
#
# OpenBLAS and PCRE2 are linked statically: the GPU machine has neither, and the
# test and benchmark binaries built here are carried there and must start as is
# (docs/DEVICE.md). Everything else is header-only or static (GoogleTest).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
if(FUTR_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()

# --- OpenBLAS (CBLAS sgemm for the CPU reference backend) ---
find_path(FUTR_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread
          HINTS /usr/include/x86_64-linux-gnu/openblas-pthread)
find_library(FUTR_OPENBLAS_STATIC NAMES libopenblas.a
             HINTS /usr/lib/x86_64-linux-gnu/openblas-pthread)
if(NOT FUTR_CBLAS_INCLUDE OR NOT FUTR_OPENBLAS_STATIC)
  message(FATAL_ERROR "OpenBLAS not found: run scripts/install-deps.sh (Debian: libopenblas-dev)")
endif()
find_library(FUTR_GFORTRAN NAMES gfortran libgfortran.so.5)
add_library(futr_blas INTERFACE)
target_include_directories(futr_blas SYSTEM INTERFACE ${FUTR_CBLAS_INCLUDE})
target_link_libraries(futr_blas INTERFACE ${FUTR_OPENBLAS_STATIC} Threads::Threads m)
if(FUTR_GFORTRAN)
  target_link_libraries(futr_blas INTERFACE ${FUTR_GFORTRAN})
endif()

# --- PCRE2 (Unicode classes in the tokenizer's pre-tokenizer patterns) ---
find_path(FUTR_PCRE2_INCLUDE pcre2.h)
find_library(FUTR_PCRE2_STATIC NAMES libpcre2-8.a)
if(NOT FUTR_PCRE2_INCLUDE OR NOT FUTR_PCRE2_STATIC)
  message(FATAL_ERROR "PCRE2 not found: run scripts/install-deps.sh (Debian: libpcre2-dev)")
endif()
add_library(futr_pcre2 INTERFACE)
target_include_directories(futr_pcre2 SYSTEM INTERFACE ${FUTR_PCRE2_INCLUDE})
target_compile_definitions(futr_pcre2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8 PCRE2_STATIC)
target_link_libraries(futr_pcre2 INTERFACE ${FUTR_PCRE2_STATIC})

# --- cpp-httplib and prometheus-cpp (futr serve, src/server/) ---
# Debian ships both as shared libraries; only the `futr` tool links them (the
# test and benchmark binaries carried to the GPU machine do not, except the
# server's own tests). httplib's pkg-config flags (CPPHTTPLIB_OPENSSL_SUPPORT,
# ...) must match how the library was compiled, so they come from its .pc.
find_package(PkgConfig REQUIRED)
pkg_check_modules(FUTR_HTTPLIB IMPORTED_TARGET cpp-httplib)
find_package(prometheus-cpp CONFIG)
if(NOT FUTR_HTTPLIB_FOUND OR NOT TARGET prometheus-cpp::core)
  message(FATAL_ERROR "cpp-httplib or prometheus-cpp not found: run scripts/install-deps.sh "
                      "(Debian: libcpp-httplib-dev prometheus-cpp-dev)")
endif()

if(FUTR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
