# CPU reference backend tests (src/cpu_engine/).
futr_add_test(cpu_ops_test SOURCES cpu_engine/ops_test.cpp LIBS futr_cpu)
futr_add_test(cpu_kv_cache_test SOURCES cpu_engine/kv_cache_test.cpp LIBS futr_cpu)
futr_add_test(cpu_forward_test SOURCES cpu_engine/forward_test.cpp LIBS futr_cpu)
futr_add_test(cpu_threads_test SOURCES cpu_engine/threads_test.cpp LIBS futr_cpu)
# The transformers cross-check needs the HF safetensors reader (futr_formats).
futr_add_test(cpu_hf_crosscheck_test SOURCES cpu_engine/hf_crosscheck_test.cpp
              LIBS futr_cpu futr_formats nlohmann_json::nlohmann_json)
