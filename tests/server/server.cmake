# `futr serve` (src/server/): stop strings, prompts, the OpenAI layer, the
# scheduler over a fake engine, and the HTTP server on the loopback; the
# end-to-end test runs the real `futr serve` with the openai Python client.
futr_add_test(server_text_stream_test SOURCES server/text_stream_test.cpp LIBS futr_server futr_formats)
futr_add_test(server_prompt_test SOURCES server/prompt_test.cpp LIBS futr_server futr_formats)
futr_add_test(server_scheduler_test SOURCES server/scheduler_test.cpp LIBS futr_server futr_formats)
futr_add_test(server_api_test SOURCES server/api_test.cpp LIBS futr_server futr_formats)
futr_add_test(server_http_test SOURCES server/http_server_test.cpp
              LIBS futr_server futr_formats PkgConfig::FUTR_HTTPLIB z)

# futr serve end to end with the openai client (test venv: scripts/test.sh).
# Label "cpu" like every test that does not need CUDA (--backend cpu), so the
# sanitizer suite runs it too; the highest COST starts it first, as the
# longest test (75 s; 95 s under ASan), instead of last and alone.
if(TARGET futr_cli_serve)
  add_test(NAME serve_openai_test
           COMMAND sh -c "exec \"\${FUTR_PYTHON:-python3}\" \"$0\" \"$1\" \"$2\""
                   ${CMAKE_CURRENT_SOURCE_DIR}/server/serve_openai_test.py $<TARGET_FILE:futr>
                   ${FUTR_DEFAULT_MODEL})
  set_tests_properties(serve_openai_test PROPERTIES TIMEOUT 900 SKIP_REGULAR_EXPRESSION "SKIP:"
                       LABELS cpu COST 1000)
endif()

# Temperature 0 means one answer: the real engine of --backend auto behind the
# server, the same request repeated and concurrent requests against their
# sequential answers (the CPU engine in CI; the GPU engine on a Hopper GPU).
futr_add_test(server_determinism_test SOURCES server/determinism_test.cpp
              LIBS futr_server futr_engines futr_formats PkgConfig::FUTR_HTTPLIB)

# Every sampling parameter at the ends of its range through the server and the
# real CPU engine (200 inside, 400 beyond, never a 500), with 200 slow
# connections open.
futr_add_test(server_sampling_sweep_test SOURCES server/sampling_sweep_test.cpp
              LIBS futr_server futr_engines futr_formats PkgConfig::FUTR_HTTPLIB)
