# futr_ref_prefill_attention: the CPU reference of the prefill attention
# (causal GQA of packed requests with prefixes over the BF16 cache).
add_library(futr_ref_prefill_attention STATIC ${CMAKE_CURRENT_LIST_DIR}/prefill_attention_ref.cpp)
target_include_directories(futr_ref_prefill_attention PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_ref_prefill_attention PUBLIC futr_ref_decode_attention futr_core PRIVATE futr_warnings)
