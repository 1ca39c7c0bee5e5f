// The `futr` subcommands; each adds itself to the CLI11 app and runs from its
// callback (errors are futr::Error, turned into a message and exit 1 by main).
#pragma once

#include <CLI/CLI.hpp>

namespace futr::cli {

void add_generate_command(CLI::App& app);    // cli/generate.cpp
void add_perplexity_command(CLI::App& app);  // cli/perplexity.cpp
void add_chat_command(CLI::App& app);        // cli/chat.cpp
void add_bench_command(CLI::App& app);       // cli/bench.cpp

}  // namespace futr::cli
