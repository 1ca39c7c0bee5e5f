# Compiler cache for C++ and CUDA: CI rebuilds the CUDA kernels on 2 cores, so a
# warm cache (CCACHE_DIR kept between runs) turns minutes into seconds.
find_program(FUTR_CCACHE ccache)
if(FUTR_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${FUTR_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${FUTR_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${FUTR_CCACHE})
endif()
