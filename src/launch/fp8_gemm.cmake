# FP8 prefill GEMM: host launcher + one .cu per epilogue policy
# instantiating its policies' rows of the one variant list (fp8_gemm_variants.h).
target_sources(futr_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tensor_map.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_scaled.cu
  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_residual.cu
  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_swiglu.cu
  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_qkv.cu)
if(FUTR_PTXAS_VERBOSE)
  set_source_files_properties(
    ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_scaled.cu ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_residual.cu
    ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_swiglu.cu ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_qkv.cu
    PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
