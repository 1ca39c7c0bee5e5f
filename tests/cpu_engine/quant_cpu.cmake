# The quantized CPU reference: quantized Linear layers, KV storages.
futr_add_test(cpu_quant_linear_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/quant_linear_test.cpp LIBS futr_cpu)
futr_add_test(cpu_kv_quant_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_quant_test.cpp LIBS futr_cpu)
