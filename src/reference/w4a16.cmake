# futr_ref_w4a16: the CPU reference of the decode GEMMs with quantized weights
# (W4A16 INT4 group-scaled, W8A16 E4M3 per-channel), float64 accumulation.
add_library(futr_ref_w4a16 STATIC ${CMAKE_CURRENT_LIST_DIR}/w4a16_ref.cpp)
target_include_directories(futr_ref_w4a16 PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_ref_w4a16 PUBLIC futr_quant futr_core PRIVATE futr_warnings)
