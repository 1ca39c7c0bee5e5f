# CPU tests of the quantized weight formats (futr_quant).
futr_add_test(int4_pack_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/int4_pack_test.cpp LIBS futr_quant futr_ref_w4a16)
