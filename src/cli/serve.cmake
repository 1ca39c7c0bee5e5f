# `futr serve` (included by src/cli/CMakeLists.txt): the server component's
# command. Linked into the `futr` tool from here (deferred to the end of the
# directory, when the futr target exists) so src/cli/CMakeLists.txt stays as is.
if(NOT TARGET futr_runtime)
  message(STATUS "futr serve: not built (no futr_runtime library yet)")
  return()
endif()
add_library(futr_cli_serve STATIC ${CMAKE_CURRENT_LIST_DIR}/serve_command.cpp)
target_include_directories(futr_cli_serve PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_cli_serve
  PUBLIC futr_server futr_runtime futr_cli_lib CLI11::CLI11
  PRIVATE futr_warnings)
cmake_language(DEFER CALL target_link_libraries futr PRIVATE futr_cli_serve)
cmake_language(DEFER CALL target_compile_definitions futr PRIVATE FUTR_HAVE_SERVE_COMMAND=1)
