# Prefill attention: causal GQA of packed prompt chunks over the
# BF16 cache (TMA + WGMMA), with its launcher and tile list.
target_sources(futr_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/prefill_attention.cu)
if(FUTR_PTXAS_VERBOSE)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/prefill_attention.cu PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
