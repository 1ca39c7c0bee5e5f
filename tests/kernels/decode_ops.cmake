# GPU tests of the decode step's small kernels: RMSNorm, RoPE,
# SwiGLU against the CPU, the KV append with RoPE fused in, PDL chains in a
# graph; they skip without a Hopper GPU.
futr_add_test(decode_ops_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/decode_ops_test.cpp
              LIBS futr_cuda futr_cpu)
