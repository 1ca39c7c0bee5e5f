# Model-format readers (src/formats/): valid files written by the tests
# themselves (gguf_writer.h, safetensors_writer.h), broken ones, the
# transformers-made tests/data/hf_tiny/*, and the real default model.
futr_add_test(ggml_types_test SOURCES formats/ggml_types_test.cpp LIBS futr_formats)
futr_add_test(gguf_test SOURCES formats/gguf_test.cpp LIBS futr_formats)
futr_add_test(gguf_broken_test SOURCES formats/gguf_broken_test.cpp LIBS futr_formats)
