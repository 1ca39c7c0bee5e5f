# GPU tests of the decode GEMMs with quantized weights; they skip
# without a Hopper GPU except the host-side rejection tests.
futr_add_test(w4a16_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/w4a16_test.cpp
              LIBS futr_cuda futr_quant futr_ref_w4a16)
