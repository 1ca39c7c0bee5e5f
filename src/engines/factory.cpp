// make_engine(): engine choice, format resolution, quantizing on load (see factory.h).
#include "engines/factory.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "cpu_engine/engine.h"
#include "cpu_engine/threads.h"
#if FUTR_HAVE_CUDA
#include "gpu_engine/engine.h"
#include "gpu_engine/prefill.h"
#include "gpu_engine/tp_engine.h"
#include "launch/device.h"
#endif
#include "formats/futr_file.h"
#include "model/synthetic.h"
#include "runtime/calibration.h"

namespace futr {

namespace engines {

bool gpu_formats(const runtime::RuntimeConfig& c) {
  return (c.weights == WeightFormat::kAuto || c.weights == WeightFormat::kInt4) && c.kv != KvFormat::kFp32;
}

namespace {

#if FUTR_HAVE_CUDA
// The GPU engine's paging options from the configuration: the block size
// (-1: the GPU default; none with tensor parallelism, which does not page),
// the blocks and the memory share.
void set_gpu_paging(const runtime::RuntimeConfig& c, gpu::GpuEngineOptions& go) {
  FUTR_CHECK(
      c.tp <= 1 || c.kv_block_size <= 0,
      "--block-size {}: the tensor-parallel GPU engine does not page its KV cache yet (--block-size 0)",
      c.kv_block_size);
  go.kv_block_size = c.kv_block_size < 0 ? (c.tp > 1 ? 0 : runtime::kDefaultGpuKvBlockSize) : c.kv_block_size;
  go.kv_blocks = c.kv_blocks;
  go.gpu_memory_fraction = c.gpu_memory_fraction;
  FUTR_CHECK(c.gpu_memory_fraction == 0 || go.kv_block_size > 0,
             "--gpu-memory-fraction sizes a paged KV cache (--block-size > 0)");
}
#endif

quant::DelayedScalingConfig fp8_config(const runtime::Fp8Config& f) {
  quant::DelayedScalingConfig c;
  c.history = f.history;
  c.margin = f.margin;
  c.policy = f.policy;
  c.scaling = f.scaling;
  c.validate();
  return c;
}

// --prefill-rows asks for GPU prefill chunks: refused where there are none.
void check_prefill_rows(const runtime::RuntimeConfig& c, bool use_gpu) {
  FUTR_CHECK(!c.lm_head_int4 || use_gpu,
             "--head int4: the INT4 LM head is the GPU engine's (this run uses the CPU "
             "engine)");
  if (c.prefill_rows == 0) return;
  FUTR_CHECK(use_gpu, "--prefill-rows {}: prefill chunks are the GPU engine's (this run uses the CPU engine)",
             c.prefill_rows);
  FUTR_CHECK(c.prefill != runtime::PrefillMode::kOff,
             "--prefill-rows {} with --prefill=off: prompts go through the "
             "decode step, there are no prefill chunks",
             c.prefill_rows);
}

#if FUTR_HAVE_CUDA
// Rows per prefill chunk: --prefill-rows or the engine's default, at most a step's rows.
int prefill_chunk_rows(const runtime::RuntimeConfig& c, int engine_default) {
  return std::min(c.prefill_rows > 0 ? c.prefill_rows : engine_default, c.max_step_tokens);
}
#endif

}  // namespace

cpu::QuantizeOptions quantize_options(WeightFormat format, const runtime::RuntimeConfig& c) {
  cpu::QuantizeOptions q;
  q.format = format;
  q.method = c.quant;
  q.act_order = c.act_order;
  q.group = c.group;
  q.calib_ctx = c.calib.ctx;
  return q;
}

std::string gpu_engine_unavailable_reason() {
#if !FUTR_HAVE_CUDA
  return "this futr was built without CUDA (no CUDA compiler at configure time): only the CPU engines are "
         "in it; rebuild with the CUDA toolkit installed (nvcc on PATH) for the GPU engine";
#endif
  std::string why;
#if FUTR_HAVE_CUDA
  why = cuda::gpu_unavailable_reason();
  // Without the kernel driver the CUDA runtime blames an "insufficient" driver
  // version; say what is the matter instead.
  if (!why.empty() && !std::filesystem::exists("/proc/driver/nvidia/version"))
    return "no NVIDIA driver found";
#endif
  std::replace(why.begin(), why.end(), '\n', ' ');
  return why.empty() ? "" : "no GPU: " + why;
}

std::unique_ptr<runtime::Engine> make_synthetic_engine(const std::string& name,
                                                       const runtime::RuntimeConfig& c, uint64_t seed,
                                                       std::unique_ptr<Model>& host_model,
                                                       const runtime::EngineLog& log) {
  const ModelConfig config = synthetic_config(name);  // refuses unknown names first
  const std::string no_gpu = gpu_engine_unavailable_reason();
  const bool use_gpu = runtime::engine_for(c) == runtime::EngineKind::kGpu;
  check_prefill_rows(c, use_gpu);
  FUTR_CHECK(c.tp == 1 || use_gpu, "--tp {}: tensor parallelism runs the GPU engine ({})", c.tp,
             no_gpu.empty() ? "asked: --backend " + to_string(c.engine) : no_gpu);
  if (!use_gpu) {
    FUTR_CHECK(
        name == "tiny" || c.engine != runtime::EngineKind::kAuto || no_gpu.empty(),
        "--synthetic {}: its weights are generated on the GPU, and there is none here ({}); on the CPU only "
        "--synthetic tiny exists",
        name, no_gpu);
    host_model = std::make_unique<Model>(synthetic_host_model(name, seed));
    return runtime::make_engine(*host_model, c, log);
  }
  FUTR_CHECK(no_gpu.empty(), "--synthetic {} --backend gpu: {} (use --backend cpu with --synthetic tiny)",
             name, no_gpu);
  FUTR_CHECK(gpu_formats(c),
             "--synthetic {} on the GPU runs int4 weights with a bf16, int4 or int4-rot KV cache (asked: "
             "--weights {} --kv {})",
             name, to_string(c.weights), to_string(c.kv));
  FUTR_CHECK(!c.quant_given && !c.act_order,
             "--synthetic: the weights are drawn directly as INT4; --quant and "
             "--act-order do not apply");
#if FUTR_HAVE_CUDA
  if (log)
    log(fmt::format("engine gpu, synthetic {} (random int4 weights drawn on the device, seed {})", name,
                    seed));
  gpu::GpuEngineOptions go;
  go.kv = c.kv == KvFormat::kAuto ? KvFormat::kBf16 : c.kv;
  FUTR_CHECK(c.kv_block == 0 || go.kv == KvFormat::kInt4Rot, "--kv-block applies to --kv int4-rot");
  go.kv_block = c.kv_block ? c.kv_block : std::min(runtime::kDefaultKvBlock, config.head_dim);
  engines::set_gpu_paging(c, go);
  go.ctx = c.ctx;
  go.max_seqs = c.max_seqs > 0 ? c.max_seqs : gpu::GpuEngine::kMaxMicroBatch;
  go.max_step_tokens = c.max_step_tokens;
  go.graphs = c.gpu_graphs;
  go.pdl = c.gpu_pdl;
  go.lm_head_int4 = c.lm_head_int4;
  {
    const std::string why = c.tp > 1 ? "tensor parallel" : gpu::PrefillPath::unsupported_reason(config);
    FUTR_CHECK(c.prefill != runtime::PrefillMode::kOn || why.empty(),
               "--prefill on: the FP8 prefill path cannot "
               "run here: {}",
               why);
    go.prefill_synthetic = c.prefill != runtime::PrefillMode::kOff && why.empty();
    go.prefill_seed = seed;
    go.fp8 = fp8_config(c.fp8);
    go.prefill_rows = prefill_chunk_rows(c, go.prefill_rows);
    if (log)
      log(go.prefill_synthetic
              ? "prompts through the FP8 prefill path (synthetic FP8 weights drawn on the device)"
              : fmt::format("prompts through the decode step ({})",
                            c.prefill == runtime::PrefillMode::kOff ? "--prefill=off" : why));
  }
  if (c.tp > 1) {
    if (log) log(fmt::format("tensor parallel over {} GPUs (each rank draws its own shard)", c.tp));
    return std::make_unique<gpu::TpGpuEngine>(config, seed, go, c.tp);
  }
  return std::make_unique<gpu::GpuEngine>(config, seed, go);
#else
  fail("--synthetic {}: this build has no GPU engine", name);
#endif
}

namespace {

std::string format_list(const std::vector<WeightFormat>& fs) {
  std::vector<std::string> s;
  for (auto f : fs) s.push_back(to_string(f));
  return fmt::format("{}", fmt::join(s, ", "));
}

}  // namespace

#if FUTR_HAVE_CUDA
// The FP8 weights of the GPU prefill path (null: prompts through the decode
// step, said on the log). Quantized on load they come without calibrated
// amax: *calib gets the held-out tokens the engine calibrates on, on the
// device (a fraction of a second, where the CPU forward took seconds).
std::shared_ptr<const quant::QuantizedWeights> prefill_weights(
    const Model& model, const runtime::RuntimeConfig& c, FutrFile* file,
    const std::vector<WeightFormat>& stored, const runtime::EngineLog& log, std::vector<int32_t>* calib) {
  using runtime::PrefillMode;
  if (c.prefill == PrefillMode::kOff) {
    if (log) log("prompts through the decode step (--prefill=off)");
    return nullptr;
  }
  std::string why =
      c.tp > 1 ? "it does not run tensor parallel yet" : gpu::PrefillPath::unsupported_reason(model.config);
  if (why.empty() && c.fp8.policy != Fp8SaturationPolicy::kClampRescale)
    why =
        "its delayed scaling runs the \"clamp\" policy on the device (--fp8-policy recompute is a "
        "CPU-reference "
        "option)";
  if (why.empty() && file && std::find(stored.begin(), stored.end(), WeightFormat::kFp8) == stored.end())
    why = fmt::format("{} holds no fp8 weights (`futr quantize` the original model with --weights int4,fp8)",
                      model.path);
  if (!why.empty()) {
    FUTR_CHECK(c.prefill != PrefillMode::kOn, "--prefill on: the FP8 prefill path cannot run: {}", why);
    if (log) log(fmt::format("prompts through the decode step (the FP8 prefill path: {})", why));
    return nullptr;
  }
  const std::string scales = c.fp8.scaling == Fp8Scaling::kStatic ? "static FP8 scales"
                                                                  : "delayed FP8 scaling per "
                                                                    "request";
  auto calibration = [&] {  // 4 windows, as `futr quantize`
    const auto t0 = std::chrono::steady_clock::now();
    auto tokens = runtime::calibration_tokens_tail(
        model, c.calib, std::min<size_t>(size_t(c.calib.tokens), size_t(std::max(1, c.calib.ctx)) * 4));
    if (log)
      log(fmt::format("calibration text: {} tokens in {:.2f} s", tokens.size(),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    return tokens;
  };
  if (file) {
    auto q = std::make_shared<quant::QuantizedWeights>(file->read_weights(WeightFormat::kFp8));
    if (q->fp8_initial_amax.empty()) *calib = calibration();
    if (log)
      log(fmt::format("prompts through the FP8 prefill path (the file's fp8 weights; {} {})", scales,
                      calib->empty()
                          ? "from the file's calibrated amax"
                          : fmt::format("calibrated on the GPU from {} held-out tokens", calib->size())));
    return q;
  }
  cpu::QuantizeOptions qo = quantize_options(WeightFormat::kFp8, c);
  *calib = calibration();
  if (log)
    log(fmt::format(
        "prompts through the FP8 prefill path: fp8 weights quantized on load, {} calibrated on the GPU "
        "from {} held-out tokens (`futr quantize --weights int4,fp8` stores them)",
        scales, calib->size()));
  cpu::set_num_threads(c.threads);
  const auto t0 = std::chrono::steady_clock::now();
  auto q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(model, qo, {}));
  if (log)
    log(fmt::format("fp8 weights quantized in {:.2f} s",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  return q;
}
#endif

}  // namespace engines

runtime::EngineKind runtime::engine_for(const RuntimeConfig& c) {
  if (c.engine != EngineKind::kAuto) return c.engine;
  return engines::gpu_engine_unavailable_reason().empty() && engines::gpu_formats(c) ? EngineKind::kGpu
                                                                                     : EngineKind::kCpu;
}

runtime::EngineWarmup::EngineWarmup(EngineKind engine) {
#if FUTR_HAVE_CUDA
  if (engine == EngineKind::kCpu) return;
  thread_ = std::thread([] { cuda::ContextWarmup().join(); });
#else
  (void)engine;
#endif
}
runtime::EngineWarmup::~EngineWarmup() {
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<runtime::Engine> runtime::make_engine(const Model& model, const RuntimeConfig& c,
                                                      const EngineLog& log) {
  FUTR_CHECK(c.ctx >= 0, "--ctx must be positive (got {})", c.ctx);
  FUTR_CHECK(c.threads >= 0, "--threads must be positive (got {})", c.threads);
  FUTR_CHECK(c.max_seqs >= 0,
             "the maximum number of sequences must be >= 0 (0: the engine's "
             "default; got {})",
             c.max_seqs);
  // --- engine ---
  // The GPU engine runs INT4 weights over a BF16 / INT4 cache: `auto` takes it
  // when a Hopper GPU is present and the formats asked for are those.
  std::string no_gpu = engines::gpu_engine_unavailable_reason();
  // The GPU engine adds q/k/v biases (qwen2) in its K/V append; tensor
  // parallelism does not shard them.
  FUTR_CHECK(
      c.tp == 1 || !model.config.qkv_bias,
      "--tp {}: the {} architecture's q/k/v projection biases are not sharded across GPUs; run it with "
      "--tp 1",
      c.tp, model.config.arch);
  const bool use_gpu = runtime::engine_for(c) == EngineKind::kGpu;
  if (c.engine == EngineKind::kGpu) {
    FUTR_CHECK(no_gpu.empty(), "--backend gpu: {} (use --backend cpu or auto)", no_gpu);
    FUTR_CHECK(engines::gpu_formats(c),
               "--backend gpu runs int4 weights with a bf16, int4 or int4-rot KV cache (asked: "
               "--weights {} --kv {}); use --backend cpu for the other formats",
               to_string(c.weights), to_string(c.kv));
  } else if (c.engine == EngineKind::kAuto) {
    if (log) {
      if (use_gpu) log("engine gpu (a Hopper GPU is present)");
      else if (!no_gpu.empty()) log(fmt::format("engine cpu ({})", no_gpu));
      else
        log(fmt::format(
            "engine cpu (the GPU engine runs int4 weights with a bf16/int4 cache; asked: --weights "
            "{} --kv {})",
            to_string(c.weights), to_string(c.kv)));
    }
  }

#if FUTR_HAVE_CUDA
  // The GPU's context comes up while the CPU reads and quantizes the weights.
  std::optional<cuda::ContextWarmup> context;
  if (use_gpu) context.emplace();
#endif
  FUTR_CHECK(
      c.prefill != PrefillMode::kOn || use_gpu,
      "--prefill on: the FP8 prefill path is the GPU engine's "
      "(this run uses the CPU engine; its FP8 reference is --weights fp8 --fp8-rms cast --fp8-numerics gpu)");
  engines::check_prefill_rows(c, use_gpu);
  FUTR_CHECK(c.tp == 1 || use_gpu, "--tp {}: tensor parallelism runs the GPU engine ({})", c.tp,
             no_gpu.empty() ? fmt::format("asked: --backend {} --weights {} --kv {}", to_string(c.engine),
                                          to_string(c.weights), to_string(c.kv))
                            : no_gpu);

  // --- weights ---
  const bool futr = model.format == "futr";
  std::unique_ptr<FutrFile> file;
  std::vector<WeightFormat> stored;
  if (futr) {
    file = std::make_unique<FutrFile>(model.path);
    stored = file->formats();
  }
  WeightFormat w = c.weights;
  if (w == WeightFormat::kAuto) {
    if (use_gpu) w = WeightFormat::kInt4;  // quantized on load (RTN) unless the .futr file holds INT4
    else w = futr && !stored.empty() ? stored.front() : WeightFormat::kFp32;
  }
  if (c.quant_given || c.act_order) {
    FUTR_CHECK(!futr,
               "{}: the weights are already quantized; --quant/--act-order apply to unquantized "
               "models (GGUF, Hugging Face)",
               model.path);
    FUTR_CHECK(w == WeightFormat::kInt4, "--quant/--act-order need --weights int4");
  }
  // --- KV ---
  KvFormat kv = c.kv;
  if (kv == KvFormat::kAuto) kv = w == WeightFormat::kFp32 ? KvFormat::kFp32 : KvFormat::kBf16;
  FUTR_CHECK(c.kv_block == 0 || kv == KvFormat::kInt4Rot, "--kv-block applies to --kv int4-rot");

  cpu::CpuEngineOptions eo;
  eo.weights = w;
  eo.kv = kv;
  eo.kv_block = c.kv_block ? c.kv_block : std::min(kDefaultKvBlock, model.config.head_dim);
  eo.ctx = c.ctx;
  // max_seqs 0: the engine's default (the GPU engine batches up to 32 sequences per step).
  eo.max_seqs = c.max_seqs > 0 ? c.max_seqs : 1;
  eo.max_step_tokens = c.max_step_tokens;
  eo.threads = c.threads;
  eo.kv_block_size = c.kv_block_size < 0 ? kDefaultKvBlockSize : c.kv_block_size;
  FUTR_CHECK(use_gpu || c.gpu_memory_fraction == 0,
             "--gpu-memory-fraction applies to the GPU engine (the CPU engine's cache: --kv-blocks)");
  eo.kv_blocks = c.kv_blocks;
  if (w != WeightFormat::kFp32 || kv != KvFormat::kFp32) {
    eo.fp8 = engines::fp8_config(c.fp8);
    eo.fp8_rms_in_cast = c.fp8.rms == Fp8RmsPlacement::kCast;
    eo.fp8_gpu_numerics = c.fp8.gpu_numerics;
  }

  std::shared_ptr<const quant::QuantizedWeights> q;
  if (w == WeightFormat::kFp8 || w == WeightFormat::kInt4) {
    if (futr) {
      FUTR_CHECK(std::find(stored.begin(), stored.end(), w) != stored.end(),
                 "{} holds no {} weights (it holds: {}); quantize the original model instead", model.path,
                 to_string(w), engines::format_list(stored));
      q = std::make_shared<quant::QuantizedWeights>(file->read_weights(w));
    } else {
      const cpu::QuantizeOptions qo = engines::quantize_options(w, c);
      std::vector<int32_t> calib;
      if (cpu::needs_calibration(qo)) {
        calib = calibration_tokens(model, c.calib);
        if (log && w == WeightFormat::kFp8)
          log(fmt::format("quantizing to fp8 on load; initial amax from {} held-out tokens", calib.size()));
        else if (log)
          log(
              fmt::format("calibrating {} on {} held-out tokens (this takes minutes; `futr quantize` "
                          "once and load the .futr file to skip it)",
                          to_string(qo.method), calib.size()));
      } else if (log && w == WeightFormat::kInt4 && qo.method == QuantMethod::kRtn) {
        // The fast path, said once: `futr quantize` has another default recipe.
        log("quantizing to int4 on load (rtn: fast, uncalibrated; `futr quantize` writes the calibrated "
            "recipe, gptq-clip with act-order, to a .futr file)");
      } else if (log) {
        log(fmt::format("quantizing to {} on load{}", to_string(w),
                        w == WeightFormat::kInt4 ? " (" + to_string(qo.method) + ")" : ""));
      }
      cpu::set_num_threads(c.threads);
      const auto t0 = std::chrono::steady_clock::now();
      q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(model, qo, calib));
      if (log)
        log(fmt::format("{} weights quantized in {:.2f} s", to_string(w),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    }
  } else if (w == WeightFormat::kBf16 && futr) {
    FUTR_CHECK(std::find(stored.begin(), stored.end(), w) != stored.end(),
               "{} holds no bf16 weights (run --weights fp32 for its dequantized weights)", model.path);
    q = std::make_shared<quant::QuantizedWeights>(file->read_weights(w));
  }
#if FUTR_HAVE_CUDA
  if (use_gpu) {
    gpu::GpuEngineOptions go;
    go.kv = kv;
    go.kv_block = eo.kv_block;
    engines::set_gpu_paging(c, go);
    go.ctx = c.ctx;
    static_assert(runtime::kDefaultServeSeqsGpu == gpu::GpuEngine::kMaxMicroBatch,
                  "futr serve's GPU default is one decode micro-step's rows");
    go.max_seqs = c.max_seqs > 0 ? c.max_seqs : gpu::GpuEngine::kMaxMicroBatch;
    go.max_step_tokens = c.max_step_tokens;
    go.graphs = c.gpu_graphs;
    go.pdl = c.gpu_pdl;
    go.lm_head_int4 = c.lm_head_int4;
    go.prefill_fp8 = engines::prefill_weights(model, c, file.get(), stored, log, &go.fp8_calibration);
    if (go.prefill_fp8) {
      go.fp8 = engines::fp8_config(c.fp8);
      go.fp8_calibration_window = c.calib.ctx;
      go.prefill_rows = engines::prefill_chunk_rows(c, go.prefill_rows);
    }
    if (c.tp > 1) {
      if (log) log(fmt::format("tensor parallel over {} GPUs", c.tp));
      return std::make_unique<gpu::TpGpuEngine>(model, std::move(q), go, c.tp);
    }
    go.log = log;
    context->join();
    return std::make_unique<gpu::GpuEngine>(model, std::move(q), go);
  }
#endif
  return std::make_unique<cpu::CpuEngine>(model, std::move(q), eo);
}

}  // namespace futr
