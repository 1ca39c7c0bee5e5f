# Decode GEMM benchmark: INT4 W4A16 vs cuBLASLt BF16, the W8A16 path
# and PyTorch's INT4 kernel (bench/peers/torch_decode_peer.py, run before it).
add_executable(w4a16_bench ${CMAKE_CURRENT_LIST_DIR}/w4a16_bench.cpp)
target_link_libraries(w4a16_bench PRIVATE futr_bench_common futr_cuda)
target_include_directories(w4a16_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)

# The floor with the decode GEMM's work added piece by piece (docs/PERF.md, decode GEMMs).
add_executable(w4a16_probe_bench ${CMAKE_CURRENT_LIST_DIR}/w4a16_probe_bench.cu)
target_link_libraries(w4a16_probe_bench PRIVATE futr_bench_common futr_cuda)
target_include_directories(w4a16_probe_bench PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR})
