# Model-format readers (src/formats/): valid files written by the tests
# themselves (gguf_writer.h, safetensors_writer.h), broken ones, the
# transformers-made tests/data/hf_tiny/*, and the real default model.
futr_add_test(ggml_types_test SOURCES formats/ggml_types_test.cpp LIBS futr_formats)
futr_add_test(gguf_test SOURCES formats/gguf_test.cpp LIBS futr_formats)
futr_add_test(gguf_broken_test SOURCES formats/gguf_broken_test.cpp LIBS futr_formats)

futr_add_test(safetensors_test SOURCES formats/safetensors_test.cpp LIBS futr_formats)
futr_add_test(hf_checkpoint_test SOURCES formats/hf_checkpoint_test.cpp LIBS futr_formats)
futr_add_test(formats_loader_test SOURCES formats/loader_test.cpp LIBS futr_formats)
futr_add_test(info_command_test SOURCES formats/info_command_test.cpp LIBS futr_cli_info)

# Not a test: the dump tool of the one-off Python cross-check (gguf_crosscheck.py).
add_executable(gguf_dump_tool formats/gguf_dump_tool.cpp)
target_link_libraries(gguf_dump_tool PRIVATE futr_formats futr_warnings)

# Hostile inputs across every reader, loaded and inspected.
futr_add_test(hostile_input_test SOURCES formats/hostile_input_test.cpp LIBS futr_formats)
# The block decoders against the Python `gguf` package (ggml_reference.py, run
# with $FUTR_PYTHON): random blocks and a model file gguf writes.
futr_add_test(ggml_crosscheck_test SOURCES formats/ggml_crosscheck_test.cpp LIBS futr_formats futr_cli_info)
