# Speculative decoding (src/runtime/ngram_drafter.h, src/runtime/speculative.h):
# the prompt-lookup drafter against a brute-force scan; drafts verified on
# every CPU KV format (the tokens of ordinary decoding), rollback, and the
# acceptance rule's distribution on a synthetic vocabulary.
futr_add_test(runtime_ngram_drafter_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ngram_drafter_test.cpp
              LIBS futr_runtime)
futr_add_test(runtime_speculative_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/speculative_test.cpp LIBS futr_engines)
