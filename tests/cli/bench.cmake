# `futr bench`: the table, the JSON, the sweeps and the refusals on
# --synthetic tiny with the CPU engines (a few seconds).
futr_add_test(cli_bench_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_cli_test.cpp LIBS futr_core)
add_dependencies(cli_bench_test futr)
target_compile_definitions(cli_bench_test PRIVATE FUTR_BINARY="$<TARGET_FILE:futr>")
