# CPU tests of the quantized weight formats (futr_quant).
futr_add_test(int4_pack_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/int4_pack_test.cpp LIBS futr_quant futr_ref_w4a16)
# Quantizers, FP8 delayed scaling, the INT4 KV mirror and the KL tool.
futr_add_test(int4_quant_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/int4_quant_test.cpp LIBS futr_quant)
futr_add_test(gptq_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gptq_test.cpp LIBS futr_quant)
futr_add_test(fp8_weights_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fp8_weights_test.cpp LIBS futr_quant)
futr_add_test(delayed_scaling_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/delayed_scaling_test.cpp LIBS futr_quant)
futr_add_test(kv_int4_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_int4_test.cpp LIBS futr_quant)
futr_add_test(kl_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kl_test.cpp LIBS futr_quant)
futr_add_test(futr_file_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/futr_file_test.cpp LIBS futr_formats futr_cpu futr_quantize)
