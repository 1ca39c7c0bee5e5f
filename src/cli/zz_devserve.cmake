add_executable(dev_serve /tmp/devserve/dev_serve.cpp)
target_link_libraries(dev_serve PRIVATE futr_server futr_cli_lib futr_formats)
target_compile_definitions(dev_serve PRIVATE FUTR_DEFAULT_MODEL="${FUTR_DEFAULT_MODEL}")
