# FP8 prefill GEMM tests: every policy against its CPU reference.
# GPU cases skip without a Hopper GPU; Fp8GemmArgs.* and Fp8GemmVariants.* run everywhere.
futr_add_test(fp8_gemm_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_test.cpp
  LIBS futr_cuda futr_ref_fp8_gemm)
