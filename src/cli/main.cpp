// futr: the FuTransformer command-line tool.
//
//   futr generate [PROMPT]      continue a prompt (cli/generate.cpp)
//   futr chat                   a conversation, one line per turn (cli/chat.cpp)
//   futr perplexity [FILE]      perplexity on a text (cli/perplexity.cpp)
//   futr bench                  prompt / generation tokens/s, decode step times (cli/bench.cpp)
//   futr info [MODEL]           model config and tensors (cli/info_command.h, if built)
//   futr quantize -o OUT.futr   quantize a model into a .futr file (cli/quantize.cpp)
//   futr serve                  OpenAI-compatible HTTP server (cli/serve_command.h, if built)
//
// Every failure (bad flags, missing files, a prompt longer than the context,
// a broken model) prints one message on stderr and exits with status 1; the
// message goes through core/text.h printable(), so bytes from hostile files
// (terminal escape sequences) never reach the terminal raw. A write error on
// standard output (a full disk, > /dev/full) exits 1 too.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/quantize.h"
#include "cli/version.h"
#include "core/error.h"
#include "core/text.h"
#if FUTR_HAVE_INFO_COMMAND
#include "cli/info_command.h"
#endif
#if FUTR_HAVE_SERVE_COMMAND
#include "cli/serve_command.h"
#endif

int main(int argc, char** argv) {
  CLI::App app{"futr: FuTransformer, Llama-style inference (CPU reference backend; Hopper GPU "
               "kernels in progress)"};
  app.set_version_flag("--version", [] { return futr::cli::version_text(); },
                       "Print the version, commit, build type, CUDA version and the GPU futr sees");
  app.require_subcommand(1);
  futr::cli::add_generate_command(app);
  futr::cli::add_chat_command(app);
  futr::cli::add_perplexity_command(app);
  futr::cli::add_bench_command(app);
  futr::cli::add_quantize_command(app);
#if FUTR_HAVE_INFO_COMMAND
  add_info_command(app);
#endif
#if FUTR_HAVE_SERVE_COMMAND
  futr::cli::add_serve_command(app);
#endif
  // Output that could not be written (a full disk, > /dev/full) is an error:
  // exit 1 with a message, never 0 with the output lost.
  auto stdout_failed = [] {
    std::cout.flush();
    if (std::cout.good() && futr::cli::stdout_ok()) return false;
    fmt::print(stderr, "futr: error: standard output: write error: {}\n", std::strerror(errno ? errno : EIO));
    return true;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 1.
    const int rc = app.exit(e) == 0 ? 0 : 1;
    return stdout_failed() ? 1 : rc;
  } catch (const futr::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "futr: error: {}\n", futr::printable(e.what(), SIZE_MAX, /*keep_newlines=*/true));
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "futr: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "futr: error: {}\n", futr::printable(e.what(), SIZE_MAX, /*keep_newlines=*/true));
    return 1;
  }
  return stdout_failed() ? 1 : 0;
}
