# GPU test of the decode step's sampler: sm90_sample_topk's tokens
# against runtime::Sampler::sample_with for the same uniforms; skips without a
# Hopper GPU except the host-side tests.
futr_add_test(sample_topk_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sample_topk_test.cpp
              LIBS futr_cuda futr_runtime)
