# futr command-line tool tests (src/cli/): end to end on the default model
# (skipped with a reason when it is absent).
futr_add_test(cli_futr_e2e_test SOURCES cli/futr_e2e_test.cpp LIBS futr_core)
add_dependencies(cli_futr_e2e_test futr)
target_compile_definitions(cli_futr_e2e_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>"
  FUTR_TEST_HAVE_CUDA=$<BOOL:${FUTR_HAVE_CUDA}> FUTR_CMAKE_COMMAND="${CMAKE_COMMAND}" FUTR_BUILD_DIR="${CMAKE_BINARY_DIR}")
# `futr chat` through pipes and `futr generate` on a pty (forkpty: libutil);
# the tokenizer gives the token counts a forged line must produce.
futr_add_test(cli_chat_test SOURCES cli/chat_test.cpp LIBS futr_formats util)
add_dependencies(cli_chat_test futr)
target_compile_definitions(cli_chat_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>")

# Issue 14: hostile command lines (ranges, options that do not apply, limits, outputs).
futr_add_test(cli_hostile_test SOURCES cli/hostile_cli_test.cpp LIBS futr_core)
add_dependencies(cli_hostile_test futr)
target_compile_definitions(cli_hostile_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>")
# llama.cpp habits: aliases, unknown commands and options named, --help and
# --help-all, serve's defaults, the default context.
futr_add_test(cli_familiar_test SOURCES cli/familiar_cli_test.cpp LIBS futr_core)
add_dependencies(cli_familiar_test futr)
target_compile_definitions(cli_familiar_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>")
