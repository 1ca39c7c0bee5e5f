# GPU tests of the FP8 activations of the prefill path: the
# quantizing kernel and the delayed-scaling update; they skip without a
# Hopper GPU except the host-side refusals.
futr_add_test(fp8_scaling_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fp8_scaling_test.cpp
              LIBS futr_cuda futr_ref_fp8_scaling futr_quant)
