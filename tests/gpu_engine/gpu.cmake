# GPU engine tests: against the CPU quantized reference on SmolLM2;
# they skip without a Hopper GPU.
futr_add_test(gpu_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
              LIBS futr_gpu futr_cpu futr_quantize futr_formats futr_tokenizer)
# Tensor parallelism: TP 1 through NCCL against the single-GPU
# engine, TP 2 against TP 1 where two GPUs exist; skips without a GPU or NCCL.
futr_add_test(gpu_tp_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tp_engine_test.cpp
              LIBS futr_gpu futr_cpu futr_quantize)
# The FP8 prefill path: against the CPU FP8 reference of the same
# numerics on SmolLM2; skips without a Hopper GPU.
futr_add_test(gpu_prefill_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefill_test.cpp
              LIBS futr_gpu futr_cpu futr_quantize futr_formats futr_tokenizer)
# Batch invariance: a row's logits alone, beside other requests and under any
# chunking, bit for bit (decode path, FP8 prefill static and delayed); skips
# without a Hopper GPU.
futr_add_test(gpu_invariance_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/invariance_test.cpp
              LIBS futr_gpu futr_cpu futr_quantize futr_formats futr_tokenizer)
# The decode step plan (op list, shapes, the batch-invariant configurations)
# for SmolLM2 and Llama-3.1-8B shapes; needs no GPU (label cpu).
futr_add_test(step_plan_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/step_plan_test.cpp LIBS futr_gpu NO_GPU)
