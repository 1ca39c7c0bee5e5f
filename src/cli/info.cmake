# `futr info` (included by src/cli/CMakeLists.txt, which links futr_cli_info
# into the futr tool and registers the command). Owned by the formats component.
add_library(futr_cli_info STATIC ${CMAKE_CURRENT_LIST_DIR}/info_command.cpp)
target_include_directories(futr_cli_info PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(futr_cli_info
  PUBLIC futr_formats CLI11::CLI11
  PRIVATE nlohmann_json::nlohmann_json futr_warnings)
target_compile_definitions(futr_cli_info PRIVATE FUTR_DEFAULT_MODEL="${FUTR_DEFAULT_MODEL}")
