// `futr quantize`: any supported model -> a .futr file (cli/quantize.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace futr::cli {

void add_quantize_command(CLI::App& app);

}  // namespace futr::cli
