// `futr quantize -o OUT.futr`: reads any supported model (GGUF, Hugging Face
// directory, another .futr file's FP32 view), quantizes its projections into
// one or more formats and writes a .futr file (formats/futr_file.h) with the
// tensors already in the kernels' layouts.
//
//   futr quantize -o smollm2-int4.futr                  # int4, gptq-clip, act-order
//   futr quantize -o smollm2.futr --weights int4,fp8 --quant gptq --no-act-order
//   futr quantize -o fast.futr --quant rtn               # seconds, no calibration
//
// --weights takes a comma-separated list of bf16, fp8, int4 (one weight set
// per format in the file). INT4 uses --quant rtn|clip|clip-act|gptq|gptq-clip,
// --act-order / --no-act-order, --group. The default INT4 recipe is
// kDefaultQuant (gptq-clip) with act-order on for the GPTQ methods: the one
// that keeps <= 60% of RTN's perplexity loss across calibration/evaluation
// domains (docs/ACCURACY.md, "Cross-domain"); it takes ~15 minutes on one
// core for SmolLM2-135M, where --quant rtn takes seconds. Quantizing on load
// (`futr generate/perplexity --weights int4` on a GGUF / HF model) stays RTN.
// gptq* and clip-act calibrate on the held-out last 10% of --calib-file
// (runtime/calibration.h), FP8 records each activation site's initial amax on
// the same tokens. A progress bar on stderr shows each stage. -o may not name
// an input (the model or the calibration text); the output is written under a
// unique temporary name and renamed (core/io.h TempOutput), so a planted
// OUT.tmp link is never followed and SIGINT/SIGTERM leave no temporary.
#include "cli/quantize.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/io.h"
#include "cpu_engine/threads.h"
#include "engines/factory.h"
#include "formats/futr_file.h"
#include "quantize/quantize.h"
#include "runtime/calibration.h"

namespace futr::cli {

namespace {

// The default INT4 recipe of `futr quantize` (not of quantizing on load, which
// is RTN): GPTQ with MSE clipping of the group scales, act-order on.
constexpr QuantMethod kDefaultQuant = QuantMethod::kGptqClip;

struct QuantizeCmdOptions {
  RunOptions run;
  std::string out;
  std::string weights = "int4";
  QuantCliOptions quant;         // quant "" = kDefaultQuant; act_order: see act_order_given
  bool act_order_given = false;  // --act-order or --no-act-order was given (else: on for gptq*)
  bool quiet = false;
};

// One progress line per stage on stderr: redrawn in place on a terminal.
class StageBar {
 public:
  explicit StageBar(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0) {}
  void update(const std::string& stage, int64_t done, int64_t total) {
    if (!enabled_) return;
    const double now = clock_.seconds();
    const bool finished = done >= total;
    if (stage == stage_ && !finished && now - last_ < (tty_ ? 0.2 : 5.0)) return;
    if (stage != stage_ && !stage_.empty() && tty_ && !line_done_) std::fputc('\n', stderr);
    if (stage != stage_) t0_ = now;
    stage_ = stage;
    last_ = now;
    const double frac = total > 0 ? double(done) / double(total) : 1.0;
    const int width = 30, fill = int(frac * width);
    const double el = now - t0_;
    const double eta = frac > 0 ? el * (1 - frac) / frac : NAN;
    const std::string line =
        fmt::format("{:<16} [{}{}] {:5.1f}% | {:.0f} s elapsed | ETA {}", stage,
                    std::string(size_t(fill), '#'), std::string(size_t(width - fill), '.'), 100 * frac, el,
                    std::isfinite(eta) ? fmt::format("{:.0f} s", eta) : std::string("--"));
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
      line_done_ = finished;
      if (finished) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool enabled_, tty_;
  Stopwatch clock_;
  std::string stage_;
  double last_ = -1e9, t0_ = 0;
  bool line_done_ = true;
};

std::vector<WeightFormat> parse_formats(const std::string& list) {
  std::vector<WeightFormat> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const WeightFormat f = parse_weight_format(item);
    FUTR_CHECK(f != WeightFormat::kFp32 && f != WeightFormat::kAuto,
               "--weights: {} is not a quantized format", item);
    for (auto g : out) FUTR_CHECK(g != f, "--weights lists {} twice", item);
    out.push_back(f);
  }
  FUTR_CHECK(!out.empty(), "--weights is empty (give int4, fp8, bf16 or a list)");
  return out;
}

// The output must not be an input (the model, any file of an input
// directory, the calibration text) and must be a new or a regular file:
// checked before the model is read.
void check_output(const std::string& out, const std::string& model_arg, const std::string& calib_file) {
  namespace fs = std::filesystem;
  const std::string kind = file_kind(out);
  FUTR_CHECK(kind == "missing" || kind == "regular file",
             "-o {}: is a {}; the output must be a new or a regular file", out, kind);
  if (kind == "missing") return;
  const fs::path in = model_arg.empty() ? fs::path(default_model_path()) : fs::path(model_arg);
  std::vector<fs::path> inputs = {in};
  std::error_code ec;
  if (fs::is_directory(in, ec))
    for (const auto& e : fs::directory_iterator(in, ec)) inputs.push_back(e.path());
  for (const fs::path& p : inputs)
    FUTR_CHECK(!fs::equivalent(out, p, ec), "-o {} is {} of the input model; choose another output file", out,
               p == in ? "the file" : "a file");
  const fs::path calib = calib_file.empty() ? fs::path(runtime::default_text_path()) : fs::path(calib_file);
  FUTR_CHECK(!fs::equivalent(out, calib, ec), "-o {} is the calibration text {}; choose another output file",
             out, calib.string());
}

void run_quantize(const QuantizeCmdOptions& o) {
  FUTR_CHECK(!o.out.empty(), "give the output file with -o OUT.futr");
  check_output(o.out, o.run.model, o.quant.calib_file);
  {
    // A .futr file under another format's name would be mistaken for one (and
    // other tools would fail on it with a confusing message).
    std::string ext = std::filesystem::path(o.out).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    FUTR_CHECK(ext != ".gguf" && ext != ".safetensors",
               "-o {}: futr quantize writes a .futr file, not {}; name it {}.futr", o.out, ext,
               std::filesystem::path(o.out).replace_extension().string());
  }
  const std::vector<WeightFormat> formats = parse_formats(o.weights);
  const bool has_int4 = std::find(formats.begin(), formats.end(), WeightFormat::kInt4) != formats.end();
  FUTR_CHECK(has_int4 || (o.quant.quant.empty() && !o.act_order_given && o.quant.group == 0),
             "--quant/--act-order/--group apply to int4 weights");
  // The default recipe: kDefaultQuant, act-order on for the GPTQ methods unless
  // --no-act-order (and refused by the quantizer for the others if asked for).
  QuantCliOptions q = o.quant;
  if (has_int4) {
    if (q.quant.empty()) q.quant = to_string(kDefaultQuant);
    if (!o.act_order_given) q.act_order = is_gptq(runtime::parse_quant_method(q.quant));
  } else {
    q.act_order = false;
  }
  runtime::RuntimeConfig rc;
  parse_quantizer_options(q, rc);
  FUTR_CHECK(!rc.act_order || is_gptq(rc.quant),
             "--act-order applies to gptq and gptq-clip (asked: --quant {})", to_string(rc.quant));
  Stopwatch total;
  const Model model = load_model_for_cli(o.run);
  const int threads = cpu::set_num_threads(o.run.threads);
  if (!o.quiet) {
    fmt::print(stderr, "futr: quantizing {} ({}, {} layers) with {} threads\n", model.path, model.format,
               model.config.n_layers, threads);
    if (has_int4)
      fmt::print(stderr, "futr: int4 recipe --quant {}{}{}{}\n", to_string(rc.quant),
                 rc.act_order ? " --act-order" : "",
                 o.quant.quant.empty() ? " (the default: docs/ACCURACY.md, \"Cross-domain\")" : "",
                 is_gptq(rc.quant)
                     ? "; GPTQ takes minutes (~15 on one core for SmolLM2-135M; --quant rtn: seconds)"
                     : "");
  }

  // Calibration tokens: GPTQ and the FP8 initial amax.
  std::vector<int32_t> calib;
  bool need_calib = false;
  for (auto f : formats) {
    const cpu::QuantizeOptions qo = engines::quantize_options(f, rc);
    need_calib = need_calib || cpu::needs_calibration(qo);
  }
  if (need_calib) {
    calib = runtime::calibration_tokens(model, rc.calib);
    if (!o.quiet)
      fmt::print(stderr, "futr: calibration: {} tokens from the last 10% of {} (windows of {})\n",
                 calib.size(), o.quant.calib_file.empty() ? "the default text" : o.quant.calib_file,
                 o.quant.calib_ctx);
  }

  StageBar bar(!o.quiet);
  std::vector<std::unique_ptr<quant::QuantizedWeights>> sets;
  nlohmann::json prov;
  prov["source"] = model.path;
  prov["source_format"] = model.format;
  prov["time"] = std::time(nullptr);
  nlohmann::json steps = nlohmann::json::array();
  for (auto f : formats) {
    const cpu::QuantizeOptions qo = engines::quantize_options(f, rc);
    Stopwatch t;
    sets.push_back(std::make_unique<quant::QuantizedWeights>(cpu::quantize_model(
        model, qo, calib, [&](const std::string& stage, int64_t d, int64_t n) { bar.update(stage, d, n); })));
    nlohmann::json s;
    s["format"] = to_string(f);
    s["method"] = sets.back()->method;
    s["seconds"] = t.seconds();
    if (f == WeightFormat::kInt4) {
      s["quant"] = to_string(qo.method);
      s["damp"] = qo.damp;
      s["act_order"] = qo.act_order;
      s["clip_steps"] = qo.clip.steps;
      s["clip_min"] = qo.clip.c_min;
    }
    if (!calib.empty() && cpu::needs_calibration(qo)) {
      s["calibration"] = {
          {"file", o.quant.calib_file.empty() ? std::string("default text") : o.quant.calib_file},
          {"slice", "last 10% of the tokens"},
          {"tokens", calib.size()},
          {"ctx", o.quant.calib_ctx}};
    }
    steps.push_back(s);
  }
  prov["steps"] = steps;

  FutrWriteOptions wo;
  wo.provenance = prov;
  wo.progress = [&](int64_t d, int64_t n) { bar.update("writing", d, n); };
  std::vector<const quant::QuantizedWeights*> ptrs;
  for (auto& s : sets) ptrs.push_back(s.get());
  write_futr(o.out, model, ptrs, wo);
  if (!o.quiet) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(o.out, ec);
    fmt::print(stderr, "futr: wrote {} ({:.1f} MiB, format version {}) in {:.1f} s\n", o.out,
               double(size) / (1 << 20), kFutrFormatVersion, total.seconds());
  }
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeCmdOptions>();
  CLI::App* sub = app.add_subcommand("quantize", "Quantize a model into a .futr file");
  add_run_options(sub, o->run);
  sub->add_option("-o,--output", o->out, "Output .futr file")->required();
  sub->add_option("--weights", o->weights, "Formats to store: a comma-separated list of int4, fp8, bf16")
      ->capture_default_str();
  sub->add_option(
         "--quant", o->quant.quant,
         fmt::format("INT4 quantizer: {} (default {}, calibrated, minutes; rtn: seconds, no calibration)",
                     fmt::join(runtime::quant_method_names(), "|"), to_string(kDefaultQuant)))
      ->check(CLI::IsMember(runtime::quant_method_names()));
  CLI::Option* act_order =
      sub->add_flag("--act-order,!--no-act-order", o->quant.act_order,
                    "GPTQ: quantize inputs by decreasing activity (default on for gptq and "
                    "gptq-clip; --no-act-order turns it off)");
  sub->add_option("--group", o->quant.group, "INT4 group size 64|128 (default: 128, 64 where K % 128 != 0)")
      ->check(CLI::IsMember({0, 64, 128}));
  add_calibration_options(sub, o->quant);
  sub->add_flag("-q,--quiet", o->quiet, "No progress or log lines on stderr");
  sub->callback([o, act_order] {
    o->act_order_given = act_order->count() > 0;
    run_quantize(*o);
  });
}

}  // namespace futr::cli
