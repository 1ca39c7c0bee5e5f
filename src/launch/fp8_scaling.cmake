# FP8 activations of the prefill path: the device delayed-scaling
# state, the quantizing kernel and the state update, with their launchers.
target_sources(futr_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fp8_scaling.cu)
target_link_libraries(futr_cuda PUBLIC futr_quant)
