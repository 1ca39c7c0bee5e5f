# futr_ref_fp8_scaling: the CPU reference of the FP8 activation quantizer of
# the prefill path (the state machine is quant::DelayedScale itself).
add_library(futr_ref_fp8_scaling STATIC ${CMAKE_CURRENT_LIST_DIR}/fp8_scaling_ref.cpp)
target_include_directories(futr_ref_fp8_scaling PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_ref_fp8_scaling PUBLIC futr_core PRIVATE futr_warnings)
