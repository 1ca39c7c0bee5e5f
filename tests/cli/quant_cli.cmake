# End-to-end tests of `futr quantize`, the quantized-reference options and the
# KL tool on the default model (skipped when the model is absent); the
# default INT4 recipe of `futr quantize` on a tiny model.
futr_add_test(cli_quant_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/quant_cli_test.cpp LIBS futr_core futr_formats)
add_dependencies(cli_quant_test futr)
target_compile_definitions(cli_quant_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>")
