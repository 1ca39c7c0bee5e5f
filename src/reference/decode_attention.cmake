# futr_ref_decode_attention: the CPU reference of the decode KV-cache kernels
# (append into the BF16 cache and the INT4 mirror; split-KV decode attention).
add_library(futr_ref_decode_attention STATIC ${CMAKE_CURRENT_LIST_DIR}/decode_attention_ref.cpp)
target_include_directories(futr_ref_decode_attention PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_ref_decode_attention PUBLIC futr_quant futr_core PRIVATE futr_warnings)
