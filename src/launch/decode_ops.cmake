# The decode path's small kernels: residual + RMSNorm (+ embedding
# gather), RoPE, SwiGLU.
target_sources(futr_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode_ops.cu)
