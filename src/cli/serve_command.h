// `futr serve`: the OpenAI-compatible HTTP server (src/server/) over the
// engine the other commands run (cli/serve_command.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace futr::cli {

void add_serve_command(CLI::App& app);

}  // namespace futr::cli
