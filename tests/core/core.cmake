# src/core/: escaping, JSON limits, limited input reads; the format enums.
futr_add_test(core_text_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/text_test.cpp LIBS futr_core)
futr_add_test(core_json_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/json_test.cpp LIBS futr_core)
futr_add_test(core_io_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/io_test.cpp LIBS futr_core)
futr_add_test(core_number_formats_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/number_formats_test.cpp LIBS futr_core)
