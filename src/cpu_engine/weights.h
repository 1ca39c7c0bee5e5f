// The weights as the CPU forward pass uses them: every projection behind the
// `Linear` interface (cpu_engine/linear.h), the norm gains and the embedding table as
// FP32 arrays.
//
// make_weights() builds them from a Model with a LinearFactory that decides,
// per projection, which Linear to build. The default factory borrows the
// model's FP32 tensors (DenseLinear, no copy). The quantized reference
// passes a factory that quantizes (INT4 g128, FP8 per channel) and may also
// rewrite the norm gains (folding the RMSNorm gain g into the next projection:
// W' = W diag(g), gain set to 1). GPTQ calibration can wrap each Linear in a
// decorator that records its inputs.
//
// The factory is given each projection's ProjId (model/projection.h: layer +
// Projection, the LM head as ProjId{}); projection_name() spells it for
// messages ("blk.3.attn_q", "output").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu_engine/linear.h"
#include "model/model.h"
#include "model/projection.h"

namespace futr::cpu {

struct CpuLayer {
  std::vector<float> attn_norm;    // [hidden] RMSNorm gain before attention
  std::vector<float> ffn_norm;     // [hidden] RMSNorm gain before the MLP
  std::unique_ptr<Linear> wq;      // [n_heads*head_dim, hidden]
  std::unique_ptr<Linear> wk;      // [n_kv_heads*head_dim, hidden]
  std::unique_ptr<Linear> wv;      // [n_kv_heads*head_dim, hidden]
  std::vector<float> bq, bk, bv;   // [q_dim], [kv_dim], [kv_dim]: qwen2's biases (empty: none)
  std::unique_ptr<Linear> wo;      // [hidden, n_heads*head_dim]
  std::unique_ptr<Linear> w_gate;  // [intermediate, hidden]
  std::unique_ptr<Linear> w_up;    // [intermediate, hidden]
  std::unique_ptr<Linear> w_down;  // [hidden, intermediate]
};

struct CpuWeights {
  const float* tok_embd = nullptr;  // [vocab, hidden], borrowed from the Model
  std::vector<CpuLayer> layers;     // [n_layers]
  std::vector<float> out_norm;      // [hidden] final RMSNorm gain
  std::unique_ptr<Linear> lm_head;  // [vocab, hidden] (tok_embd when tied)
};

// Builds the Linear for one projection from its FP32 weight [out, in].
using LinearFactory = std::function<std::unique_ptr<Linear>(ProjId id, const Tensor& weight)>;

// The default: DenseLinear borrowing the model's tensor.
std::unique_ptr<Linear> dense_linear(ProjId id, const Tensor& weight);

// Checks every tensor's shape against model.config (futr::Error naming the
// tensor otherwise) and builds the layers. The Model must outlive the result.
CpuWeights make_weights(const Model& model, const LinearFactory& factory = dense_linear);

}  // namespace futr::cpu
