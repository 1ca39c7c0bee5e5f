# GPU engine tests (issue 10): against the CPU quantized reference on SmolLM2;
# they skip without a Hopper GPU.
futr_add_test(gpu_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
              LIBS futr_gpu futr_cpu futr_formats futr_tokenizer)
