# GPU tests of the decode KV-cache kernels; they skip without a Hopper
# GPU except the host-side rejection tests.
futr_add_test(decode_attention_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/decode_attention_test.cpp
              LIBS futr_cuda futr_ref_decode_attention)
