# `futr generate` and `futr chat` with --speculative: the same text as without
# (greedy, sampled, stop strings, a full context, chat turns), the --json
# statistics, refused flags. On the default model (skipped when absent).
futr_add_test(cli_speculative_test SOURCES cli/speculative_cli_test.cpp LIBS futr_core)
add_dependencies(cli_speculative_test futr)
target_compile_definitions(cli_speculative_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>")
