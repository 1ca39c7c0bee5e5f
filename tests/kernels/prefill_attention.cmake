# GPU tests of the prefill attention; they skip without a Hopper GPU
# except the host-side tile-list and rejection tests.
futr_add_test(prefill_attention_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefill_attention_test.cpp
              LIBS futr_cuda futr_ref_prefill_attention)
