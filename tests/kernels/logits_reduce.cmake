# GPU tests of the decode step's logits reductions: argmax,
# log-sum-exp and log p(target) against the float64 reference; they skip
# without a Hopper GPU except the host-side rejection test.
futr_add_test(logits_reduce_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/logits_reduce_test.cpp
              LIBS futr_cuda futr_runtime futr_ref_logits_reduce)
