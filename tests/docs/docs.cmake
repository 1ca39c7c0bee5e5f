# The docs' relative links resolve and no comment or doc cites a file outside
# the repository (a shell script: no build needed).
add_test(NAME docs_links_test COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/docs_links_test.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(docs_links_test PROPERTIES LABELS cpu TIMEOUT 60)
