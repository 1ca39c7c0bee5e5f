// `futr perplexity [FILE]`: perplexity of a model on a text file, evaluated in
// context windows (runtime/perplexity.h has the window rule, the batching
// and the statistics). The text is read as bytes and tokenized whole (with BOS first
// if the model's tokenizer adds one), then cut to --max-tokens.
//
// Output: a progress bar on stderr (scored/total targets, tokens/s, ETA,
// running perplexity) and `perplexity = X +- SE` on stdout, or with --json one
// JSON object: ppl, stderr, nll_mean, nll_stderr, tokens (scored), tokens_evaluated,
// text_tokens, windows, ctx, stride, seconds, tokens_per_second, model,
// text_file, backend.
//
// Engine options (cli/engine_options.h): --backend, --weights, --quant, --kv,
// ... ; --batch is the engine's max_step_tokens (rows per step). KL against a base run
// (quant/kl.h): --save-kl-base FILE stores the run's coarsened per-token
// distributions (top --kl-topk log-probabilities + the remaining mass);
// --kl-base FILE compares this run with them: mean KL (a lower bound of the
// full-vocabulary KL), top-1 agreement, and the perplexity delta (paired over
// the same targets). JSON adds kl_mean, kl_stderr, top1_agreement, ppl_base,
// ppl_delta, nll_delta, nll_delta_stderr, kl_topk, weights/kv (describe), fp8.
#include "cli/commands.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "quant/kl.h"
#include "runtime/calibration.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace futr::cli {

namespace {

using runtime::NllStats;
using runtime::PplLogitsHook;
using runtime::PplProgress;
using runtime::PplResult;

struct PerplexityOptions {
  RunOptions run;
  std::string file = runtime::default_text_path();
  int stride = 0;          // 0: ctx
  int64_t max_tokens = 0;  // 0: all
  int batch = 512;         // tokens per step (the engine's max_step_tokens)
  int seqs = 0;            // windows evaluated side by side (0: the engine's default)
  bool json = false;
  bool quiet = false;        // no progress bar
  QuantCliOptions quant;     // --weights, --kv, ... (cli/engine_options.h)
  std::string save_kl_base;  // write the coarsened distributions here
  std::string kl_base;       // compare with this base file
  int kl_topk = 32;          // tokens kept per row by --save-kl-base
};

std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// Progress bar on stderr: redrawn in place on a terminal (at most 5 times a
// second), one line every 10 s otherwise (logs).
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}
  void update(const PplProgress& p) {
    if (!enabled_) return;
    const bool done = p.scored == p.total;
    if (!done && p.seconds - last_ < (tty_ ? 0.2 : 10.0)) return;
    last_ = p.seconds;
    const double frac = p.total ? double(p.scored) / double(p.total) : 1.0;
    const int width = 30, fill = int(frac * width);
    const double rate = p.seconds > 0 ? double(p.evaluated) / p.seconds : 0.0;
    const double eta = frac > 0 ? p.seconds * (1.0 - frac) / frac : NAN;
    std::string line =
        fmt::format("[{}{}] {}/{} tokens {:5.1f}% | {:.1f} tok/s | elapsed {} | ETA {} | ppl {:.4f}",
                    std::string(size_t(fill), '#'), std::string(size_t(width - fill), '.'), p.scored, p.total,
                    100.0 * frac, rate, hms(p.seconds), hms(eta), p.stats ? p.stats->ppl() : NAN);
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
      if (done) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  bool tty_;
  double last_ = -1e9;
};

void run_perplexity(const PerplexityOptions& o) {
  FUTR_CHECK(o.run.ctx >= 2, "--ctx {} is out of range (2..the model's trained context)", o.run.ctx);
  const int ctx = o.run.ctx;
  FUTR_CHECK(o.stride >= 0 && o.stride <= ctx, "--stride {} is out of range (1..--ctx {}; 0 or absent: ctx)",
             o.stride, ctx);
  const int stride = o.stride > 0 ? o.stride : ctx;
  FUTR_CHECK(o.max_tokens >= 0, "--max-tokens must be >= 0 (got {})", o.max_tokens);
  const std::string text = read_file_bytes(o.file);
  FUTR_CHECK(!text.empty(), "{}: the file is empty", o.file);

  // The GPU comes up while the model is read.
  const runtime::EngineWarmup warmup(runtime::parse_engine_kind(o.run.backend));
  const Model model = load_model_for_cli(o.run);
  FUTR_CHECK(!model.tokenizer.tokens.empty(), "{}: the model has no tokenizer", model.path);
  const Tokenizer tok(model.tokenizer);
  if (!o.quiet) fmt::print(stderr, "futr: tokenizing {} ({} bytes)\n", o.file, text.size());
  std::vector<int32_t> tokens = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
  const int64_t text_tokens = int64_t(tokens.size());
  if (o.max_tokens > 0 && int64_t(tokens.size()) > o.max_tokens) tokens.resize(size_t(o.max_tokens));

  runtime::RuntimeConfig rc = runtime_config(o.run, o.quant);
  rc.ctx = ctx;
  rc.max_step_tokens = o.batch;
  rc.max_seqs = o.seqs;
  check_ctx(model, ctx, rc.max_seqs, "--ctx", 2);
  FUTR_CHECK(o.save_kl_base.empty() || o.kl_base.empty(),
             "--save-kl-base and --kl-base are exclusive (save the base run first)");
  std::unique_ptr<quant::KlBase> kl_save, kl_base;
  std::unique_ptr<quant::KlCompare> kl;
  if (!o.kl_base.empty()) {
    kl_base = std::make_unique<quant::KlBase>(quant::KlBase::read(o.kl_base));
    const nlohmann::json& m = kl_base->meta();
    FUTR_CHECK(m.value("ctx", -1) == ctx && m.value("stride", -1) == stride &&
                   m.value("tokens", int64_t(-1)) == int64_t(tokens.size()),
               "{}: the base run used ctx {} stride {} on {} tokens; this run uses ctx {} stride {} on "
               "{} tokens",
               o.kl_base, m.value("ctx", -1), m.value("stride", -1), m.value("tokens", int64_t(-1)), ctx,
               stride, tokens.size());
    kl = std::make_unique<quant::KlCompare>(*kl_base);
  }
  if (!o.save_kl_base.empty()) {
    FUTR_CHECK(o.kl_topk >= 1 && o.kl_topk <= model.config.vocab, "--kl-topk {} out of range (1..{})",
               o.kl_topk, model.config.vocab);
    kl_save = std::make_unique<quant::KlBase>(o.kl_topk, model.config.vocab);
  }
  const std::unique_ptr<runtime::Engine> engine = runtime::make_engine(model, rc, stderr_log(o.quiet));
  warn_if_contended(o.run, engine->info(), o.quiet);
  const runtime::EngineInfo& info = engine->info();
  if (!o.quiet)
    fmt::print(stderr, "futr: {} | {} tokens of {} | ctx {} stride {} | {}\n", model.path, tokens.size(),
               text_tokens, ctx, stride, info.describe);

  ProgressBar bar(!o.quiet);
  PplLogitsHook hook;
  if (kl_save || kl)
    hook = [&](const Tensor& logits, int rows, const int32_t* targets) {
      const int V = int(logits.dim(1));
      if (kl_save) kl_save->add_rows(logits.ptr(), rows, V, targets);
      if (kl) kl->add_rows(logits.ptr(), rows, V, targets);
    };
  const PplResult r = runtime::evaluate_perplexity(
      *engine, tokens, ctx, stride, o.batch, [&](const PplProgress& p) { bar.update(p); }, hook);
  if (kl_save) {
    nlohmann::json meta;
    meta["model"] = model.path;
    meta["backend"] = info.describe;
    meta["text_file"] = o.file;
    meta["ctx"] = ctx;
    meta["stride"] = stride;
    meta["tokens"] = int64_t(tokens.size());
    meta["scored"] = r.stats.count();
    meta["ppl"] = r.stats.ppl();
    meta["nll_mean"] = r.stats.mean();
    kl_save->write(o.save_kl_base, meta);
    if (!o.quiet)
      fmt::print(stderr, "futr: saved the KL base ({} rows, top {}) to {}\n", kl_save->size(), kl_save->k(),
                 o.save_kl_base);
  }
  if (kl)
    FUTR_CHECK(kl->count() == kl_base->size(), "{}: the base file holds {} rows, this run scored {}",
               o.kl_base, kl_base->size(), kl->count());
  const nlohmann::json stats = engine->stats();
  const nlohmann::json fp8 = stats.contains("fp8") ? stats["fp8"] : nlohmann::json();
  const NllStats& s = r.stats;
  const double tps = r.seconds > 0 ? double(r.evaluated) / r.seconds : 0.0;
  if (o.json) {
    nlohmann::ordered_json j;
    j["ppl"] = s.ppl();
    j["stderr"] = s.ppl_stderr();
    j["nll_mean"] = s.mean();
    j["nll_stderr"] = s.stderr_mean();
    j["tokens"] = s.count();
    j["tokens_evaluated"] = r.evaluated;
    j["text_tokens"] = text_tokens;
    j["windows"] = r.windows;
    j["ctx"] = ctx;
    j["stride"] = stride;
    j["seconds"] = r.seconds;
    j["tokens_per_second"] = tps;
    j["model"] = model.path;
    j["text_file"] = o.file;
    j["backend"] = info.name;
    j["backend_detail"] = info.describe;
    if (kl) {
      j["kl_mean"] = kl->mean_kl();
      j["kl_stderr"] = kl->kl_stderr();
      j["top1_agreement"] = kl->top1();
      j["ppl_base"] = std::exp(kl->base_mean_nll());
      j["ppl_delta"] = s.ppl() - std::exp(kl->base_mean_nll());
      j["nll_delta"] = kl->mean_nll_delta();
      j["nll_delta_stderr"] = kl->nll_delta_stderr();
      j["kl_topk"] = kl_base->k();
      j["kl_base"] = o.kl_base;
    }
    if (!fp8.is_null()) j["fp8"] = fp8;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("perplexity = {:.4f} +- {:.4f}\n", s.ppl(), s.ppl_stderr());
    if (kl) {
      const double base = std::exp(kl->base_mean_nll());
      fmt::print("vs base {:.4f}: delta ppl = {:+.4f} (mean NLL delta {:+.5f} +- {:.5f})\n", base,
                 s.ppl() - base, kl->mean_nll_delta(), kl->nll_delta_stderr());
      fmt::print(
          "KL(base || this) = {:.5f} +- {:.5f} (top-{} + rest lower bound), top-1 agreement "
          "= {:.2f}%\n",
          kl->mean_kl(), kl->kl_stderr(), kl_base->k(), 100.0 * kl->top1());
    }
    if (!fp8.is_null())
      fmt::print(stderr, "futr: FP8 delayed scaling: {} calls, {} saturated ({} values), max amax {}\n",
                 fp8["calls"].get<uint64_t>(), fp8["saturated_calls"].get<uint64_t>(),
                 fp8["saturated_values"].get<uint64_t>(), fp8["max_amax"].get<float>());
    fmt::print(stderr,
               "futr: {} tokens scored in {} windows ({} evaluated) in {:.1f} s, {:.1f} tokens/s; "
               "mean NLL {:.5f} +- {:.5f}\n",
               s.count(), r.windows, r.evaluated, r.seconds, tps, s.mean(), s.stderr_mean());
  }
  std::fflush(stdout);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  o->run.ctx = 1024;
  CLI::App* sub = app.add_subcommand("perplexity", "Perplexity of the model on a text file");
  CLI::Option* file = sub->add_option("file", o->file, "Text file, read as bytes")->capture_default_str();
  auto file_opt = std::make_shared<std::string>();
  CLI::Option* file_flag = sub->add_option("-f,--file", *file_opt, "Text file (same as the argument)");
  file_flag->excludes(file);
  add_run_options(sub, o->run);
  add_tp_option(sub, o->run);
  // NOTE: a measurement setting, fixed so that results compare (docs/ACCURACY.md);
  // the commands that hold a conversation default to the model's context.
  sub->add_option("-c,--ctx,--ctx-size", o->run.ctx,
                  "Evaluation window in tokens (fixed, so results compare)")
      ->capture_default_str();
  sub->add_option("--stride", o->stride,
                  "Window stride (default: ctx); with stride < ctx each window after the first "
                  "scores only its last `stride` tokens");
  sub->add_option("-n,--max-tokens", o->max_tokens, "Evaluate only the first N tokens of the text (0: all)");
  sub->add_option("--batch", o->batch, "Tokens per engine step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--seqs", o->seqs,
                  "Windows evaluated side by side (0: the engine's default: 32 on the GPU engine, 1 on the "
                  "CPU; results do not depend on it)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--json", o->json, "Print the result as a JSON object");
  sub->add_flag("-q,--quiet", o->quiet, "No progress bar or log lines on stderr");
  add_quant_options(sub, o->quant);
  add_calibration_options(sub, o->quant);
  sub->add_option("--save-kl-base", o->save_kl_base,
                  "Save this run's per-token top-k distributions as a KL base file");
  sub->add_option("--kl-base", o->kl_base,
                  "Compare with a KL base file: mean KL, top-1 agreement, perplexity delta");
  sub->add_option("--kl-topk", o->kl_topk, "Tokens kept per row by --save-kl-base")->capture_default_str();
  hide_advanced(sub);
  sub->callback([o, file_opt, file_flag] {
    PerplexityOptions copy = *o;
    if (file_flag->count() > 0) copy.file = *file_opt;
    run_perplexity(copy);
  });
}

}  // namespace futr::cli
