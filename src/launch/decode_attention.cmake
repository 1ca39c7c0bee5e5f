# Decode-step KV-cache kernels: the cache append and split-KV decode
# attention over the BF16 cache and the INT4 mirror, with their launcher.
target_sources(futr_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode_attention.cu)
if(FUTR_PTXAS_VERBOSE)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/decode_attention.cu PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
