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
// standard output (a full disk, > /dev/full) exits 1 too. Ctrl-C ends a
// command with status 130 (generate prints its statistics first).
//
// Habits from llama.cpp work: its spellings are aliases where they do not
// clash (-p/--prompt, --temp, -c/--ctx-size, -f/--file, -n/--n-predict,
// --ignore-eos), -ngl/--n-gpu-layers is accepted and ignored with a note, an
// unknown command or option is named with the nearest known one, and
// `--help-all` lists the advanced options `--help` leaves out.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

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

namespace {

// Levenshtein distance (the "did you mean" of unknown names).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of `names` to `word` ("" when none is close: at most a third of
// its length, at least 2 edits; a prefix or extension of it counts as 2).
std::string nearest(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& n : names) {
    size_t d = edit_distance(word, n);
    // A prefix or extension of a name counts as two edits (a real typo of one edit wins).
    if (word.size() >= 4 && (n.rfind(word, 0) == 0 || word.rfind(n, 0) == 0)) d = std::min<size_t>(d, 2);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

std::vector<std::string> option_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands({})) names.push_back(s->get_name());
  return names;
}

// The words after "not expected: " in CLI11's ExtrasError message.
std::vector<std::string> unexpected_words(const std::string& what) {
  std::vector<std::string> words;
  const size_t at = what.find(": ");
  if (at == std::string::npos) return words;
  std::string w;
  for (char c : what.substr(at + 2) + " ") {
    if (c == ' ') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return words;
}

}  // namespace

int main(int argc, char** argv) {
  // llama.cpp's -ngl N: the GPU engine holds the whole model when it runs.
  // --help-all: --help with the advanced options (cli/common.h).
  std::vector<char*> args(argv, argv + argc);
  bool help_all = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--help-all") {
      help_all = true;
      args[i] = const_cast<char*>("--help");
    } else if (a == "-ngl" || a == "--n-gpu-layers" || a == "--gpu-layers" ||
               a.rfind("--n-gpu-layers=", 0) == 0) {
      const bool has_value = a.find('=') == std::string_view::npos && i + 1 < args.size();
      fmt::print(stderr,
                 "futr: note: {} ignored: the GPU engine runs every layer on the GPU when a Hopper GPU is "
                 "present (--backend auto|gpu|cpu chooses the engine)\n",
                 a);
      args.erase(args.begin() + long(i), args.begin() + long(i) + (has_value ? 2 : 1));
      --i;
    }
  }
  argc = int(args.size());
  argv = args.data();
  futr::cli::set_help_all(help_all);

  CLI::App app{
      "futr: FuTransformer, Llama-style inference (CPU reference backend; Hopper GPU "
      "kernels in progress)"};
  app.set_version_flag(
      "--version", [] { return futr::cli::version_text(); },
      "Print the version, commit, build type, CUDA version and the GPU futr sees");
  app.require_subcommand(1);
  futr::cli::use_help_formatter(app);
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
  app.footer("futr <command> --help: the common options of a command; --help-all: every option");
  // An unknown command: named, with the nearest one and the list.
  if (argc > 1 && argv[1][0] != '-') {
    const std::vector<std::string> commands = command_names(app);
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
      const std::string near = nearest(argv[1], commands);
      fmt::print(stderr, "futr: error: unknown command '{}'{}; the commands: {} (futr --help)\n",
                 futr::printable(argv[1], 64), near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near),
                 fmt::join(commands, ", "));
      return 1;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    // An unknown option: the nearest option of the command it was given to.
    const CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
    const std::vector<std::string> names = option_names(sub);
    std::string hint;
    for (const std::string& w : unexpected_words(e.what())) {
      if (w.size() < 2 || w[0] != '-') continue;
      const std::string key = w.substr(0, w.find('='));
      const std::string near = nearest(key, names);
      hint += fmt::format("; unknown option {}{}", futr::printable(key, 64),
                          near.empty() ? "" : fmt::format(" (did you mean {}?)", near));
    }
    fmt::print(stderr, "futr: error: {}{}\nRun with --help for more information.\n", e.what(), hint);
    return 1;
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 1.
    const int rc = app.exit(e) == 0 ? 0 : 1;
    return stdout_failed() ? 1 : rc;
  } catch (const futr::cli::ExitStatus& e) {
    std::fflush(stdout);
    return stdout_failed() ? 1 : e.code;
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
