// Shared CLI helpers (see common.h).
#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io.h"
#include "cpu_engine/threads.h"
#include "formats/loader.h"

#ifndef FUTR_DEFAULT_MODEL
#define FUTR_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace futr::cli {

CLI::Option* add_sampling_options(CLI::App* app, runtime::SamplerConfig& c) {
  const GroupNewOptions group(app, kSamplingGroup);
  app->add_option("--temperature,--temp", c.temperature, "Sampling temperature, [0, 100]; 0 = greedy")
      ->capture_default_str();
  app->add_option("--top-k", c.top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(0, INT32_MAX));
  app->add_option("--top-p", c.top_p,
                  "Nucleus, (0, 1]: keep the most likely tokens up to this probability mass")
      ->capture_default_str();
  app->add_option("--min-p", c.min_p,
                  "[0, 1]: drop tokens less likely than this times the most likely (0: off)")
      ->capture_default_str();
  app->add_option("--repetition-penalty,--repeat-penalty", c.repetition_penalty,
                  "(0, 10]: divide the positive (multiply the negative) logits of recent tokens (1: off)")
      ->capture_default_str();
  app->add_option("--presence-penalty", c.presence_penalty,
                  "[-2, 2]: subtract from the logits of tokens generated recently (0: off)")
      ->capture_default_str();
  app->add_option("--frequency-penalty", c.frequency_penalty,
                  "[-2, 2]: subtract this times each recent generated token's count (0: off)")
      ->capture_default_str();
  app->add_option("--penalty-last-n", c.penalty_last_n, "Recent tokens the penalties look at (0: all)")
      ->capture_default_str();
  // NOTE: a vector option takes the words after it too unless extra
  // arguments are off: `--stop X PROMPT` would make PROMPT a stop string.
  app->add_option("--stop", c.stop, "Stop before this text (one per --stop; at most 16)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return app->add_option("--seed", c.seed, "Random seed, 0..2^64-1 (default: random)")
      ->check([](const std::string& v) {
        // NOTE: checked as text: a negative value would wrap to a huge seed, and
        // one above 2^64-1 would be clamped to it silently by the conversion.
        const std::string max = "18446744073709551615";
        const size_t b = v.find_first_not_of('0');
        const std::string digits = b == std::string::npos ? "0" : v.substr(b);
        const bool ok = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos &&
                        (digits.size() < max.size() || (digits.size() == max.size() && digits <= max));
        return ok ? std::string() : "the seed must be in 0.." + max + " (an integer)";
      });
}

void print_sampling(const runtime::SamplerConfig& c) {
  if (c.temperature == 0.0f) {
    fmt::print(stderr, "futr: sampling greedy");
  } else {
    fmt::print(stderr, "futr: sampling temperature {} top-k {} top-p {}", c.temperature, c.top_k, c.top_p);
    if (c.min_p > 0.0f) fmt::print(stderr, " min-p {}", c.min_p);
  }
  if (c.repetition_penalty != 1.0f) fmt::print(stderr, " repetition-penalty {}", c.repetition_penalty);
  if (c.presence_penalty != 0.0f) fmt::print(stderr, " presence-penalty {}", c.presence_penalty);
  if (c.frequency_penalty != 0.0f) fmt::print(stderr, " frequency-penalty {}", c.frequency_penalty);
  if (c.repetition_penalty != 1.0f || c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f)
    fmt::print(stderr, " (last {} tokens)", c.penalty_last_n);
  if (!c.stop.empty()) fmt::print(stderr, " stop x{}", c.stop.size());
  if (c.temperature > 0.0f) fmt::print(stderr, " seed {}", c.seed);
  fmt::print(stderr, "\n");
}

void add_run_options(CLI::App* app, RunOptions& o) {
  const GroupNewOptions group(app, kModelGroup);
  app->add_option(
      "-m,--model", o.model,
      "Model file or directory (GGUF, Hugging Face safetensors directory); default: " + default_model_path());
  // NOTE: CLI::NonNegativeNumber prints DBL_MAX's 309 digits in its message.
  app->add_option("-t,--threads", o.threads,
                  fmt::format("CPU threads, 0..{} (default: the physical cores, one left free above 4, fewer "
                              "when other processes keep them busy, at most OMP_NUM_THREADS where set; "
                              "{} here when idle; more warns)",
                              max_threads(), cpu::idle_default_threads()))
      ->check(CLI::Range(0, max_threads()));
  app->add_option("--backend", o.backend,
                  "Engine: cpu|gpu|auto (auto: the GPU engine when it can run, else cpu; says "
                  "which on stderr)")
      ->check(CLI::IsMember(runtime::engine_kind_names()))
      ->capture_default_str();
  app->add_flag("--prefill{on}", o.prefill,
                "GPU engine: prompts through the FP8 prefill path (FP8 GEMMs, prefill attention, delayed "
                "scaling): --prefill (= on), --prefill=off (prompts through the decode step), auto (default: "
                "on when FP8 weights can be had: quantized on load, or stored in the .futr file)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app->add_option(
         "--prefill-rows", o.prefill_rows,
         "GPU engine: rows per prefill chunk, 16..65536 (default 2048; a step's prompt rows are packed into "
         "chunks of at most this many, capped at the rows a step may hold); larger chunks, larger GEMMs")
      ->check(CLI::Range(16, 65536));
}

void add_tp_option(CLI::App* app, RunOptions& o) {
  const GroupNewOptions group(app, kModelGroup);
  app->add_option(
         "--tp", o.tp,
         "Tensor parallelism: split the model over N GPUs of this machine (GPU engine; N divides the "
         "query heads, the KV heads and the FFN width)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

namespace {
bool g_help_all = false;
}  // namespace

void set_help_all(bool all) { g_help_all = all; }

namespace {
// NOTE: CLI11 hides an option by giving it the empty group, but then its
// errors lose its name (": sometimes not in {auto,on,off}"); the advanced
// group keeps its name and only the help leaves it out.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_group(std::string group, bool is_positional,
                         std::vector<const CLI::Option*> opts) const override {
    if (group == kAdvancedGroup && !g_help_all) return {};
    return CLI::Formatter::make_group(std::move(group), is_positional, std::move(opts));
  }
};
}  // namespace

void use_help_formatter(CLI::App& app) { app.formatter(std::make_shared<HelpFormatter>()); }

void hide_advanced(CLI::App* sub) {
  static const char* const kAdvanced[] = {"--tp",           "--prefill",    "--prefill-rows", "--quant",
                                          "--act-order",    "--group",      "--kv-block",     "--fp8-scaling",
                                          "--fp8-history",  "--fp8-margin", "--fp8-policy",   "--fp8-rms",
                                          "--fp8-numerics", "--calib-file", "--calib-tokens", "--calib-ctx"};
  int moved = 0;
  for (const char* name : kAdvanced) {
    CLI::Option* opt = sub->get_option_no_throw(name);
    if (opt == nullptr) continue;
    opt->group(kAdvancedGroup);
    ++moved;
  }
  if (moved > 0 && !g_help_all)
    sub->footer(
        fmt::format("{} more options (FP8 scaling, INT4 quantizers, calibration, the GPU prefill path, "
                    "tensor parallelism): futr {} --help-all",
                    moved, sub->get_name()));
}

int default_ctx(const Model& model, int seqs) {
  const ModelConfig& c = model.config;
  int ctx = std::min(c.max_context, kDefaultCtx);
  const uint64_t per_position = uint64_t(std::max(seqs, 1)) * uint64_t(c.n_layers) * uint64_t(c.kv_dim()) * 8;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && per_position > 0) {
    const uint64_t fit = uint64_t(pages) * uint64_t(page) / 2 / per_position;
    if (fit < uint64_t(ctx)) ctx = int(std::max<uint64_t>(fit / 256 * 256, 256));
  }
  return std::max(1, std::min(ctx, c.max_context));
}

void print_ctx(const Model& model, int ctx, bool given) {
  const int trained = model.config.max_context;
  if (given)
    fmt::print(stderr, "futr: context {} tokens (--ctx; the model's trained context: {})\n", ctx, trained);
  else
    fmt::print(stderr, "futr: context {} tokens (the model's trained context {}{}; --ctx to change)\n", ctx,
               trained,
               ctx == trained       ? ""
               : ctx == kDefaultCtx ? fmt::format(", capped at {}", kDefaultCtx)
                                    : ", capped by this machine's memory");
}

void warn_if_contended(const RunOptions& o, const runtime::EngineInfo& info, bool quiet) {
  if (quiet || info.name != "cpu") return;
  if (o.threads != 0) {  // a count the user chose: warn when the busy CPUs cannot run it
    if (const std::string w = cpu::contention_warning(o.threads); !w.empty()) fmt::print(stderr, "{}\n", w);
    return;
  }
  // The default adapted to the CPUs other processes leave free: say so (not
  // where OMP_NUM_THREADS set it: the user chose that count).
  if (cpu::default_threads() < cpu::idle_default_threads() &&
      cpu::default_threads() != cpu::omp_num_threads_env()) {
    double load[1] = {0};
    if (getloadavg(load, 1) != 1) load[0] = 0;
    fmt::print(stderr,
               "futr: the CPUs are busy (load average {:.1f} on {} logical CPUs): {} thread{} instead of {} "
               "(-t to choose)\n",
               load[0], cpu::logical_cpus(), cpu::default_threads(), cpu::default_threads() == 1 ? "" : "s",
               cpu::idle_default_threads());
  }
}

std::string default_model_path() { return FUTR_DEFAULT_MODEL; }

Model load_model_for_cli(const RunOptions& o) {
  std::string path = o.model;
  if (path.empty()) {
    path = default_model_path();
    FUTR_CHECK(std::filesystem::exists(path),
               "the default model {} is missing: run scripts/fetch-model.sh (or pass --model PATH)", path);
  }
  FUTR_CHECK(std::filesystem::exists(path), "model {} does not exist", path);
  return load_model(path);
}

std::string read_file_bytes(const std::string& path) {
  return read_file_limited(path, kMaxTextBytes, "a text file");
}

int max_threads() { return int(std::max(64u, 4 * std::thread::hardware_concurrency())); }

void check_ctx(const Model& model, int64_t ctx, int seqs, const char* flag, int64_t min) {
  const ModelConfig& c = model.config;
  FUTR_CHECK(ctx >= min && ctx <= c.max_context,
             "{} {} is out of range ({}..{}, the model's trained context)", flag, ctx, min, c.max_context);
  // FP32 K and V for every layer, position and sequence: the largest KV format.
  const uint64_t kv =
      uint64_t(ctx) * uint64_t(std::max(seqs, 1)) * uint64_t(c.n_layers) * uint64_t(c.kv_dim()) * 8;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) {
    const uint64_t mem = uint64_t(pages) * uint64_t(page);
    const uint64_t per_position = kv / uint64_t(ctx);
    FUTR_CHECK(kv <= mem,
               "{} {}{}: its KV cache ({}) is larger than this machine's memory ({}); at most {} positions "
               "per sequence{} fit",
               flag, ctx, seqs > 1 ? fmt::format(" x {} sequences (--max-seqs)", seqs) : "", human_bytes(kv),
               human_bytes(mem), mem / per_position, seqs > 1 ? fmt::format(" with {} sequences", seqs) : "");
  }
}

void check_logits_finite(std::span<const float> logits, const std::string& what) {
  for (size_t i = 0; i < logits.size(); ++i)
    FUTR_CHECK(!std::isnan(logits[i]) && logits[i] != INFINITY,
               "{}: the logits are not finite (id {} = {}); the model or its weights produce NaN/Inf", what,
               i, logits[i]);
}

runtime::EngineLog stderr_log(bool quiet) {
  if (quiet) return {};
  return [](const std::string& s) { fmt::print(stderr, "futr: {}\n", s); };
}

std::string read_stdin_bytes() { return read_fd_limited(0, kMaxStdinBytes, "stdin"); }

void write_stdout(std::string_view s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size())
    fail("standard output: write error: {}", std::strerror(errno));
  FUTR_CHECK(stdout_ok(), "standard output: write error: {}", std::strerror(errno));
}

bool stdout_ok() { return std::fflush(stdout) == 0 && !std::ferror(stdout); }

LineRead read_line_capped(std::istream& in, std::string& line, size_t max) {
  line.clear();
  bool any = false, too_long = false;
  std::streambuf* sb = in.rdbuf();
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      if (!any) return LineRead::kEnd;
      break;
    }
    any = true;
    if (c == '\n') break;
    if (line.size() < max) line += char(c);
    else too_long = true;
  }
  if (too_long) {
    line.clear();
    return LineRead::kTooLong;
  }
  return LineRead::kLine;
}

}  // namespace futr::cli
