# GPU engine tests (issue 10): against the CPU quantized reference on SmolLM2;
# they skip without a Hopper GPU.
futr_add_test(gpu_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
              LIBS futr_gpu futr_cpu futr_formats futr_tokenizer)
# Tensor parallelism (issue 16): TP 1 through NCCL against the single-GPU
# engine, TP 2 against TP 1 where two GPUs exist; skips without a GPU or NCCL.
futr_add_test(gpu_tp_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tp_engine_test.cpp
              LIBS futr_gpu futr_cpu)
# The FP8 prefill path (issue 12): against the CPU FP8 reference of the same
# numerics on SmolLM2; skips without a Hopper GPU.
futr_add_test(gpu_prefill_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefill_test.cpp
              LIBS futr_gpu futr_cpu futr_formats futr_tokenizer)
