# FP8 prefill GEMM benchmark; its PyTorch peer is
# bench/peers/torch_prefill_peer.py, run after it by scripts/gpu-check.sh.
add_executable(fp8_gemm_bench ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_bench.cpp)
target_link_libraries(fp8_gemm_bench PRIVATE futr_bench_common futr_warnings)
