# The decode path's small kernels (issue 10): residual + RMSNorm (+ embedding
# gather), RoPE, SwiGLU.
target_sources(futr_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode_ops.cu)
