# Decode GEMMs with weight-only quantization: W4A16 kernels, the W8A16
# comparison path, their launcher (explicit variant list + heuristic) and the
# W4Linear / W8Linear host API.
target_sources(futr_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/w4a16.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear.cpp)
if(FUTR_PTXAS_VERBOSE)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/w4a16.cu PROPERTIES COMPILE_OPTIONS "-Xptxas=-v")
endif()
