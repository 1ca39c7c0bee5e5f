// The linear projections of a Llama model named by enum + layer index: what
// the quantizers, the quantized weights (quant/quantized_model.h), the CPU
// weight factory (cpu_engine/weights.h) and the FP8 activation sites use. The
// strings "blk.<l>.attn_q" ... "output" exist only at the file boundary
// (GGUF, .futr: projection_name() / parse_projection_name(),
// docs/FORMATS.md) and in messages.
//
// Input sites: the activations a projection reads, one per RMSNorm or
// product, in forward order:
//   kAttnIn  RMSNorm(x; g_attn) -> q, k, v      (gain g_attn folded in by FP8)
//   kOIn     attention output   -> o
//   kFfnIn   RMSNorm(x; g_ffn)  -> gate, up     (gain g_ffn folded in by FP8)
//   kDownIn  SwiGLU output      -> down
// The first reader of each site (q, o, gate, down) is the one that records
// its statistics (GPTQ Hessian, FP8 amax).
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "model/model.h"

namespace futr {

enum class Projection : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown, kLmHead };

// The seven projections of a layer, in forward order.
inline constexpr std::array<Projection, 7> kLayerProjections = {
    Projection::kQ,    Projection::kK,  Projection::kV,   Projection::kO,
    Projection::kGate, Projection::kUp, Projection::kDown};

struct ProjId {
  int layer = -1;  // [0, n_layers); -1 for the LM head
  Projection proj = Projection::kLmHead;
  auto operator<=>(const ProjId&) const = default;
};

enum class InputSite : uint8_t { kAttnIn, kOIn, kFfnIn, kDownIn };
inline constexpr int kInputSites = 4;  // per layer

struct SiteId {
  int layer = 0;
  InputSite site = InputSite::kAttnIn;
  auto operator<=>(const SiteId&) const = default;
};

InputSite input_site(Projection p);  // futr::Error for the LM head
bool records_site(Projection p);     // q, o, gate, down: the first reader of its site
bool reads_rmsnorm(Projection p);    // q, k, v, gate, up: behind an RMSNorm

// "blk.<l>.attn_q" | attn_k | attn_v | attn_output | ffn_gate | ffn_up | ffn_down, "output".
std::string projection_name(ProjId id);
// The inverse; futr::Error naming `name` for anything else.
ProjId parse_projection_name(const std::string& name);
// "blk.<l>.attn_in" | o_in | ffn_in | down_in, and the inverse.
std::string site_name(SiteId s);
SiteId parse_site_name(const std::string& name);

// The FP32 weight [out, in] of `id` in `m` (the LM head: tok_embd when tied).
const Tensor& projection_weight(const Model& m, ProjId id);
// The RMSNorm gain in front of `id` ([hidden]); nullptr for o, down and the LM head.
const Tensor* rmsnorm_gain(const Model& m, ProjId id);

}  // namespace futr
