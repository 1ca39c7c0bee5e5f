# Warnings for host C++ and for the host side of CUDA translation units.
add_library(futr_warnings INTERFACE)
target_compile_options(futr_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr -lineinfo>)
