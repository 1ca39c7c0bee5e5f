# futr_ref_logits_reduce: the CPU reference of the decode step's logits
# reductions (argmax, log-sum-exp, log p(target); sm90_logits_reduce), float64.
add_library(futr_ref_logits_reduce STATIC ${CMAKE_CURRENT_LIST_DIR}/logits_reduce_ref.cpp)
target_include_directories(futr_ref_logits_reduce PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_ref_logits_reduce PUBLIC futr_core PRIVATE futr_warnings)
