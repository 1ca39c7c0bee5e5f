# Decode attention benchmark; its PyTorch peer is
# bench/peers/torch_attention_peer.py, run before it by scripts/gpu-check.sh.
add_executable(decode_attention_bench ${CMAKE_CURRENT_LIST_DIR}/decode_attention_bench.cpp)
target_link_libraries(decode_attention_bench PRIVATE futr_bench_common futr_warnings)
target_include_directories(decode_attention_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)
