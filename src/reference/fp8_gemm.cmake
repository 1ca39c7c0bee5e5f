# futr_ref_fp8_gemm: CPU reference of the FP8 prefill GEMM and its epilogues.
add_library(futr_ref_fp8_gemm STATIC ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_ref.cpp)
target_include_directories(futr_ref_fp8_gemm PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_ref_fp8_gemm PUBLIC futr_core PRIVATE OpenMP::OpenMP_CXX futr_warnings)
target_compile_options(futr_ref_fp8_gemm PRIVATE -O3)
