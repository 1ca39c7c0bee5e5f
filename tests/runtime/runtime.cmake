# Runtime tests (src/runtime/): the sampler, perplexity evaluation, and the
# Engine contract on every CPU engine (src/cpu_engine/engine.h) through make_engine().
futr_add_test(runtime_sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cpp LIBS futr_runtime)
futr_add_test(runtime_perplexity_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/perplexity_test.cpp
              LIBS futr_engines)
futr_add_test(runtime_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp LIBS futr_engines)
futr_add_test(runtime_sequence_table_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sequence_table_test.cpp
              LIBS futr_runtime)
# Tensor parallelism on the CPU: the Megatron split of a small
# random Llama, rank by rank, against the unsplit cpu::Forward; the plan's
# ranges and refusals.
futr_add_test(runtime_tensor_parallel_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_test.cpp
              LIBS futr_cpu futr_runtime)
# The calibration text's held-out tail (the GPU engine's calibration on load).
futr_add_test(runtime_calibration_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/calibration_test.cpp
              LIBS futr_runtime futr_formats futr_tokenizer)
