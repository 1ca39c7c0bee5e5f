// Helpers shared by the `futr` subcommands: the model/engine options every
// command takes, the default model, reading files, timing.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <istream>
#include <span>
#include <string>
#include <string_view>

#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace futr::cli {

// --model, --ctx, --threads, --backend.
struct RunOptions {
  std::string model;             // "" -> default_model_path()
  int ctx = 0;                   // command-specific default when 0
  int threads = 0;               // 0: cpu::default_threads() (the free physical cores)
  std::string backend = "auto";  // auto | cpu | gpu (runtime::parse_engine_kind)
  int tp = 1;                    // GPUs, tensor parallel (add_tp_option; the commands that run a model)
  std::string prefill = "auto";  // auto | on | off: the GPU engine's FP8 prefill path (runtime::PrefillMode)
  int prefill_rows = 0;          // rows per prefill chunk (GPU engine); 0: the engine's default (2048)
};

// `--help` groups: the options of a command fall into these three (and the
// command's own, under "Options").
inline constexpr const char* kSamplingGroup = "Sampling";
inline constexpr const char* kModelGroup = "Model and engine";
inline constexpr const char* kQuantGroup = "Quantized reference (CPU reference of the GPU formats)";
// The research knobs (FP8 scaling, INT4 quantizers, calibration, the GPU
// prefill path, tensor parallelism): listed by `--help-all` only; they parse
// the same either way.
inline constexpr const char* kAdvancedGroup = "Advanced (FP8, quantizers, calibration, GPU prefill)";

// `futr <command> --help-all`: main() turns it into --help and calls this
// before the commands are added, so hide_advanced() shows every option.
void set_help_all(bool all);
// Moves the advanced options of `sub` (the names in hide_advanced()'s list,
// common.cpp) into kAdvancedGroup, which --help leaves out and --help-all
// shows (use_help_formatter()), and says so in the command's footer.
void hide_advanced(CLI::App* sub);
// The help formatter of futr: main() sets it on the app before the commands
// are added (they inherit it).
void use_help_formatter(CLI::App& app);

// Thrown by a command to end futr with this status after its output (generate
// after Ctrl-C: 130, the shell's status for SIGINT).
struct ExitStatus {
  int code;
};

// Puts every option added to `app` during its lifetime into `group`.
class GroupNewOptions {
 public:
  GroupNewOptions(CLI::App* app, std::string group)
      : app_(app), group_(std::move(group)), before_(app->get_options().size()) {}
  ~GroupNewOptions() {
    auto all = app_->get_options([](CLI::Option*) { return true; });
    for (size_t i = before_; i < all.size(); ++i) all[i]->group(group_);
  }

 private:
  CLI::App* app_;
  std::string group_;
  size_t before_;
};

// The sampling flags (runtime::SamplerConfig: --temperature, --top-k, --top-p,
// --min-p, --repetition-penalty, --presence-penalty, --frequency-penalty,
// --penalty-last-n, --stop, --seed), in kSamplingGroup. Returns --seed (to tell
// whether it was given). The ranges are checked by runtime::Sampler.
CLI::Option* add_sampling_options(CLI::App* app, runtime::SamplerConfig& c);
// "futr: sampling ..." on stderr: the settings that differ from off.
void print_sampling(const runtime::SamplerConfig& c);

// Adds --model, --threads and --backend (not --ctx: its default differs per
// command) to `app`.
void add_run_options(CLI::App* app, RunOptions& o);
// --tp N: tensor parallelism over N GPUs (generate, chat, perplexity, bench, serve).
void add_tp_option(CLI::App* app, RunOptions& o);

// The default context of generate, chat and serve: the model's trained
// context, at most kDefaultCtx, and at most what the FP32 KV cache of `seqs`
// sequences fits in half the machine's memory (at least 256 or the trained
// context). perplexity keeps its own fixed window (a measurement setting) and
// bench sizes the context to its tests.
inline constexpr int kDefaultCtx = 4096;
int default_ctx(const Model& model, int seqs);
// "futr: context N tokens (...)" on stderr, saying where N came from.
void print_ctx(const Model& model, int ctx, bool given);

// After make_engine(): when the CPU engine runs at the default thread count
// (--threads not given) and the 1-minute load average says other processes
// keep the CPUs busy, a warning with the -t value to try (cpu::contention_warning).
void warn_if_contended(const RunOptions& o, const runtime::EngineInfo& info, bool quiet);

// FUTR_DEFAULT_MODEL (compile definition set in the top-level CMakeLists).
std::string default_model_path();

// Loads o.model (or the default model, with a hint to run
// scripts/fetch-model.sh when it is missing). futr::Error on failure.
Model load_model_for_cli(const RunOptions& o);

// Input size limits (docs/RELIABILITY.md): a text file (perplexity,
// calibration) and a prompt on stdin.
inline constexpr uint64_t kMaxTextBytes = 1ull << 30;
inline constexpr uint64_t kMaxStdinBytes = 64ull << 20;
// Largest --threads: 4 threads per hardware thread, at least 64 (more only
// costs memory and, past OpenMP's limits, crashes inside it).
int max_threads();

// The whole file as bytes (core/io.h: a regular file of at most kMaxTextBytes);
// futr::Error naming it when it cannot be read.
std::string read_file_bytes(const std::string& path);

// Writes `s` to stdout and flushes; futr::Error "standard output: write error:
// <reason>" if it fails (a full disk, /dev/full), so output is never lost
// silently. main() checks stdout once more before exiting 0.
void write_stdout(std::string_view s);
// False (with errno set) if stdout has had a write error or cannot be flushed.
bool stdout_ok();

// Everything on stdin as bytes, at most kMaxStdinBytes.
std::string read_stdin_bytes();

// One line of `in` (without the newline) in linear time, at most `max` bytes
// kept: a longer line is read to its end and dropped (kTooLong), so a line
// without a newline never grows memory without bound.
enum class LineRead { kLine, kEnd, kTooLong };
inline constexpr size_t kMaxChatLineBytes = 1 << 20;
LineRead read_line_capped(std::istream& in, std::string& line, size_t max = kMaxChatLineBytes);

// Checks the context a command asked for against the model: at least `min`,
// at most the trained context (max_context), and its KV cache (FP32, the
// largest format; `seqs` sequences) at most the machine's memory.
// `flag` names the option in messages ("--ctx").
void check_ctx(const Model& model, int64_t ctx, int seqs, const char* flag, int64_t min = 1);

// futr::Error naming `what` (e.g. "generate: step 3 (token 2)") if a logit is NaN or +inf.
void check_logits_finite(std::span<const float> logits, const std::string& what);

// The EngineLog of make_engine(): "futr: <line>" on stderr unless quiet.
runtime::EngineLog stderr_log(bool quiet);

// Seconds since construction.
class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace futr::cli
