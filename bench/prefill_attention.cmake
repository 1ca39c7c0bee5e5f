# Prefill attention benchmark; its PyTorch peer is
# bench/peers/torch_prefill_attention_peer.py, run before it by scripts/gpu-check.sh.
add_executable(prefill_attention_bench ${CMAKE_CURRENT_LIST_DIR}/prefill_attention_bench.cpp)
target_link_libraries(prefill_attention_bench PRIVATE futr_bench_common futr_warnings)
target_include_directories(prefill_attention_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)
