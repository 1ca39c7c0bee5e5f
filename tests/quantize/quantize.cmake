# Whole-model quantization (src/quantize/) on small random models, run by the
# quantized CPU reference.
futr_add_test(cpu_model_quant_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_quant_test.cpp LIBS futr_quantize futr_cpu)
