// Quantized-reference options and backend (see quantize_run.h).
#include "cli/quantize_run.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "cli/common.h"
#include "core/error.h"
#include "cpu/threads.h"
#include "formats/futr_file.h"
#include "tokenizer/tokenizer.h"

namespace futr::cli {

namespace {

class QuantCpuBackend final : public Backend {
 public:
  QuantCpuBackend(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                  const cpu::QuantRunOptions& ro, const BackendOptions& bo)
      : threads_(cpu::set_num_threads(bo.threads)), qf_(model, std::move(q), ro, bo.ctx) {}
  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    const cpu::KvStorage& kv = qf_.forward().cache().storage();
    return fmt::format("cpu (quantized reference: {}; {} threads, ctx {}, KV {:.1f} MiB)",
                       qf_.describe(), threads_, qf_.forward().capacity(),
                       double(kv.bytes()) / (1 << 20));
  }
  int capacity() const override { return qf_.forward().capacity(); }
  int position() const override { return qf_.forward().position(); }
  void reset() override { qf_.forward().reset(); }
  Tensor eval(std::span<const int32_t> tokens, int first_logit) override {
    return qf_.forward().eval(tokens, first_logit);
  }
  const cpu::QuantForward& quant_forward() const { return qf_; }

 private:
  int threads_;
  cpu::QuantForward qf_;
};

quant::DelayedScalingConfig fp8_config(const QuantCliOptions& o) {
  quant::DelayedScalingConfig c;
  c.history = o.fp8_history;
  c.margin = o.fp8_margin;
  FUTR_CHECK(o.fp8_policy == "clamp" || o.fp8_policy == "recompute",
             "--fp8-policy '{}' (choose clamp, recompute)", o.fp8_policy);
  c.policy = o.fp8_policy == "clamp" ? quant::SaturationPolicy::kClampRescale
                                     : quant::SaturationPolicy::kRecompute;
  c.validate();
  return c;
}

}  // namespace

void add_quant_options(CLI::App* app, QuantCliOptions& o) {
  app->add_option("--weights", o.weights,
                  "Weight format of the CPU reference: auto|fp32|bf16|fp8|int4 (auto: fp32, or the "
                  ".futr file's own format)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp8", "int4"}))
      ->capture_default_str();
  app->add_option("--quant", o.quant,
                  "INT4 quantizer when quantizing on load: rtn|clip|clip-act|gptq|gptq-clip (default rtn)")
      ->check(CLI::IsMember({"rtn", "clip", "clip-act", "gptq", "gptq-clip"}));
  app->add_flag("--act-order", o.act_order, "GPTQ: quantize inputs by decreasing activity");
  app->add_option("--group", o.group, "INT4 group size 64|128 (default: 128, 64 where K % 128 != 0)")
      ->check(CLI::IsMember({0, 64, 128}));
  app->add_option("--kv", o.kv,
                  "KV cache format: auto|fp32|bf16|int4|int4-rot (auto: fp32 with fp32 weights, "
                  "else bf16)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "int4", "int4-rot"}))
      ->capture_default_str();
  app->add_option("--kv-block", o.kv_block,
                  fmt::format("Hadamard block size of --kv int4-rot (default {}, at most head_dim)",
                              kDefaultKvBlock))
      ->check(CLI::Range(1, 1024));
  app->add_option("--fp8-history", o.fp8_history, "FP8 delayed scaling: amax history length (calls)")
      ->capture_default_str();
  app->add_option("--fp8-margin", o.fp8_margin,
                  "FP8 delayed scaling: headroom factor (>= 1) over the history's amax")
      ->capture_default_str();
  app->add_option("--fp8-policy", o.fp8_policy,
                  "FP8 on saturation: clamp (count, clamp, re-scale next call) | recompute")
      ->check(CLI::IsMember({"clamp", "recompute"}))
      ->capture_default_str();
  app->add_option("--fp8-rms", o.fp8_rms,
                  "FP8 folded RMSNorm: 1/rms applied in the GEMM epilogue (the design) or before "
                  "the E4M3 cast")
      ->check(CLI::IsMember({"epilogue", "cast"}))
      ->capture_default_str();
}

void add_calibration_options(CLI::App* app, QuantCliOptions& o) {
  app->add_option("--calib-file", o.calib_file,
                  "Calibration text (default: the perplexity text); its last 10% of tokens are used");
  app->add_option("--calib-tokens", o.calib_tokens, "Calibration tokens (at most)")
      ->check(CLI::Range(16, 1 << 24))
      ->capture_default_str();
  app->add_option("--calib-ctx", o.calib_ctx, "Calibration window length")
      ->check(CLI::Range(16, 1 << 16))
      ->capture_default_str();
}

std::vector<int32_t> calibration_tokens(const Model& model, const QuantCliOptions& o) {
  const std::string file = o.calib_file.empty() ? default_text_path() : o.calib_file;
  std::error_code ec;
  FUTR_CHECK(std::filesystem::exists(file, ec), "{}: no such file (the calibration text{}; give one with --calib-file)",
             file, o.calib_file.empty() ? ", by default the perplexity text" : "");
  const std::string text = read_file_bytes(file);
  FUTR_CHECK(!model.tokenizer.tokens.empty(), "{}: the model has no tokenizer (needed for calibration)",
             model.path);
  const Tokenizer tok(model.tokenizer);
  const std::vector<int32_t> all = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
  // The held-out slice: the last 10% of the tokens.
  const size_t from = all.size() - all.size() / 10;
  std::vector<int32_t> out(all.begin() + long(from), all.end());
  if (out.size() > size_t(o.calib_tokens)) out.resize(size_t(o.calib_tokens));
  FUTR_CHECK(out.size() >= size_t(o.calib_ctx),
             "{}: the calibration slice (last 10%) has {} tokens, less than --calib-ctx {}", file,
             out.size(), o.calib_ctx);
  return out;
}

cpu::QuantizeOptions quantize_options(quant::WeightFormat format, const QuantCliOptions& o) {
  cpu::QuantizeOptions q;
  q.format = format;
  q.method = o.quant.empty() ? "rtn" : o.quant;
  q.act_order = o.act_order;
  q.group = o.group;
  q.calib_ctx = o.calib_ctx;
  return q;
}

std::unique_ptr<Backend> make_quant_backend(const Model& model, const BackendOptions& bo,
                                            const QuantCliOptions& o,
                                            const std::function<void(const std::string&)>& log) {
  using quant::WeightFormat;
  const bool futr = model.format == "futr";
  std::unique_ptr<FutrFile> file;
  std::vector<WeightFormat> stored;
  if (futr) {
    file = std::make_unique<FutrFile>(model.path);
    stored = file->formats();
  }
  // --- weights ---
  WeightFormat w;
  if (o.weights == "auto") {
    w = futr && !stored.empty() ? stored.front() : WeightFormat::kFp32;
  } else {
    w = quant::parse_weight_format(o.weights);
  }
  if (!o.quant.empty() || o.act_order) {
    FUTR_CHECK(!futr, "{}: the weights are already quantized; --quant/--act-order apply to unquantized "
               "models (GGUF, Hugging Face)", model.path);
    FUTR_CHECK(w == WeightFormat::kInt4, "--quant/--act-order need --weights int4");
  }
  // --- KV ---
  const cpu::KvMode kv = o.kv == "auto" ? (w == WeightFormat::kFp32 ? cpu::KvMode::kFp32 : cpu::KvMode::kBf16)
                                        : cpu::parse_kv_mode(o.kv);
  if (w == WeightFormat::kFp32 && kv == cpu::KvMode::kFp32 && !futr) return make_backend(model, bo);
  FUTR_CHECK(o.kv_block == 0 || kv == cpu::KvMode::kInt4Rot, "--kv-block applies to --kv int4-rot");
  FUTR_CHECK(bo.kind == "cpu" || bo.kind == "auto",
             "the quantized reference runs on the CPU backend (--backend cpu), not '{}'", bo.kind);

  cpu::QuantRunOptions ro;
  ro.weights = w;
  ro.kv = kv;
  ro.kv_block = o.kv_block ? o.kv_block : std::min(kDefaultKvBlock, model.config.head_dim);
  ro.fp8 = fp8_config(o);
  ro.fp8_rms_in_cast = o.fp8_rms == "cast";

  std::shared_ptr<const quant::QuantizedWeights> q;
  if (w == WeightFormat::kFp8 || w == WeightFormat::kInt4) {
    if (futr) {
      FUTR_CHECK(std::find(stored.begin(), stored.end(), w) != stored.end(),
                 "{} holds no {} weights (it holds: {}); quantize the original model instead",
                 model.path, to_string(w), fmt::join([&] {
                   std::vector<std::string> s;
                   for (auto f : stored) s.push_back(to_string(f));
                   return s;
                 }(), ", "));
      q = std::make_shared<quant::QuantizedWeights>(file->read_weights(w));
    } else {
      const cpu::QuantizeOptions qo = quantize_options(w, o);
      std::vector<int32_t> calib;
      if (cpu::needs_calibration(qo)) {
        calib = calibration_tokens(model, o);
        if (log && w == WeightFormat::kFp8)
          log(fmt::format("quantizing to fp8 on load; initial amax from {} held-out tokens", calib.size()));
        else if (log)
          log(fmt::format("calibrating {} on {} held-out tokens (this takes minutes; `futr quantize` "
                          "once and load the .futr file to skip it)",
                          qo.method, calib.size()));
      } else if (log) {
        log(fmt::format("quantizing to {} on load{}", to_string(w),
                        w == WeightFormat::kInt4 ? " (" + qo.method + ")" : ""));
      }
      cpu::set_num_threads(bo.threads);
      q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(model, qo, calib));
    }
  } else if (w == WeightFormat::kBf16 && futr) {
    FUTR_CHECK(std::find(stored.begin(), stored.end(), w) != stored.end(),
               "{} holds no bf16 weights (run --weights fp32 for its dequantized weights)", model.path);
    q = std::make_shared<quant::QuantizedWeights>(file->read_weights(w));
  }
  return std::make_unique<QuantCpuBackend>(model, q, ro, bo);
}

nlohmann::json fp8_scaling_report(const Backend& backend) {
  const auto* b = dynamic_cast<const QuantCpuBackend*>(&backend);
  if (!b || !b->quant_forward().fp8_bank()) return nullptr;
  const quant::ScaleBank& bank = *b->quant_forward().fp8_bank();
  const quant::ScaleStats t = bank.total();
  nlohmann::json j;
  j["history"] = bank.config().history;
  j["margin"] = bank.config().margin;
  j["policy"] = bank.config().policy == quant::SaturationPolicy::kClampRescale ? "clamp" : "recompute";
  j["calls"] = t.calls;
  j["saturated_calls"] = t.saturated_calls;
  j["saturated_values"] = t.saturated_values;
  j["zero_calls"] = t.zero_calls;
  j["recomputes"] = t.recomputes;
  j["max_amax"] = t.max_amax;
  return j;
}

}  // namespace futr::cli
