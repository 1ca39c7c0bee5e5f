// futr_engines: the one place that sees every engine. It defines
// runtime::make_engine() (declared in runtime/engine.h), which the commands
// and the server call without knowing the backends:
//
//   engine  --backend cpu: the CPU engines (cpu_engine/engine.h);
//           --backend gpu: the GPU engine; until it exists a futr::Error
//             ("the GPU engine is not built yet", or why there is no GPU);
//           --backend auto: the GPU engine when it exists and a Hopper GPU is
//             present, else the CPU engine; the choice and its reason are
//             one line on the EngineLog ("engine cpu (no GPU: ...)").
//   weights auto: fp32 for an unquantized model (GGUF, Hugging Face), the
//             file's own format for a .futr file (int4 if it holds INT4, else
//             fp8, else bf16). An unquantized model is quantized on load
//             (fp8 per channel; bf16; int4 with --quant, calibrating first
//             for clip-act and gptq*). A .futr file is used as stored: it
//             must hold the format asked for, and --quant is refused.
//   kv      auto: fp32 with fp32 weights, else bf16; --kv-block only with
//             int4-rot (default kDefaultKvBlock capped at head_dim).
//
// Also here: the quantizer options a RuntimeConfig stands for (used by
// make_engine() and by `futr quantize`).
#pragma once

#include <memory>
#include <string>

#include "model/model.h"
#include "quantize/quantize.h"
#include "runtime/config.h"
#include "runtime/engine.h"

namespace futr::engines {

// cpu::QuantizeOptions for `format` from the quantizer fields of `c`
// (quant, act_order, group, calib.ctx).
cpu::QuantizeOptions quantize_options(WeightFormat format, const runtime::RuntimeConfig& c);

// The one-line reason why `auto` does not pick the GPU engine ("the GPU engine
// is not built yet" or "no GPU: <cuda::gpu_unavailable_reason()>"); "" when it does.
std::string gpu_engine_unavailable_reason();

// The formats the GPU engine runs: INT4 weights (auto or int4) over a BF16 /
// INT4 cache (anything but FP32).
bool gpu_formats(const runtime::RuntimeConfig& c);

// The engine of `--synthetic NAME` (model/synthetic.h): random weights of a
// real model's shapes. The GPU engine (--backend gpu, or auto with a GPU)
// draws every weight on the device, for any name; it runs int4 weights (auto
// or int4) and a bf16/int4/int4-rot cache. The CPU engines get `tiny` only,
// as a host model placed in `host_model` (which must outlive the engine) and
// going through make_engine() like a loaded one; the others are refused with
// the reason. `seed` draws the weights.
std::unique_ptr<runtime::Engine> make_synthetic_engine(const std::string& name,
                                                       const runtime::RuntimeConfig& c, uint64_t seed,
                                                       std::unique_ptr<Model>& host_model,
                                                       const runtime::EngineLog& log = {});

}  // namespace futr::engines
