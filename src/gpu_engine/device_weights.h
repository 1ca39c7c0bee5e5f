// The model's weights on the GPU, one object that the decode step and the FP8
// prefill path both read (the engine owns it; the prefill path borrows it).
//
//   embd      [vocab][H] BF16                 the embedding (the tied LM head's rows too)
//   lm_head   [lm_rows][H] BF16               the LM head's rows [lm_begin, lm_begin + lm_rows)
//                                             (empty when tied: the embedding's rows)
//   lm_head_int4  [lm_rows][H] INT4           optional (--head int4): those rows quantized (RTN,
//                                             FP16 scales per group of 128, or 64 where H % 128 != 0),
//                                             in the decode GEMMs' fragment order
//   out_norm  [H] BF16                        the final RMSNorm gain
//   per layer:
//     attn_norm, ffn_norm   [H] BF16          RMSNorm gains
//     qkv_bias  [q + 2 kv] FP32               q|k|v projection biases (qwen2; empty otherwise),
//                                             added by the K/V append before RoPE
//     INT4 (decode, cuda::W4Linear: nibbles and FP16 group scales in fragment
//     order, kernels/layout/int4_fragment.cuh):
//       qkv      [q + 2 kv][H]                q|k|v fused by stacking their logical rows
//       o        [H][q]
//       gate_up  [2I][H]                      gate rows, then up rows
//       down     [H][I]
//     FP8 (prefill, optional; E4M3 K-major [n][k] with FP32 per-channel scales):
//       qkv      [q + 2 kv][H]                the attention RMSNorm gain folded in
//       o        [H][q]
//       gu       [2I][H]                      gate/up interleaved by row (row 2i gate i, 2i+1 up i),
//                                             the FFN RMSNorm gain folded in
//       down     [H][I]
//
// Uploaded in the layouts the .futr file stores: the INT4 projections of a
// layer are fused by concatenating their logical rows and packing once on the
// host (no FP32), the FP8 ones stacked (gate/up interleaved) as stored;
// embedding, gains and head converted to BF16. Synthetic models draw every
// weight on the device from a seed (launch/fill.h): random INT4 nibbles with
// FP16 group scales sized so activations stay O(1) (group 128, or 64 where
// K % 128 != 0), BF16 gains near 1, embedding and head; FP8 weights uniform
// in [-1, 1) with per-channel scales ~1 / (0.58 sqrt(K)).
//
// Tests: through the engine (tests/gpu_engine/engine_test.cpp against the CPU
// quantized reference, prefill_test.cpp against the CPU FP8 reference).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "launch/buffer.h"
#include "launch/linear.h"
#include "model/model.h"
#include "model/projection.h"
#include "quant/quantized_model.h"

namespace futr::gpu {

class DeviceWeights {
 public:
  struct Layer {
    cuda::DeviceBuffer<uint16_t> attn_norm, ffn_norm;  // [H] BF16
    std::unique_ptr<cuda::W4Linear> qkv;               // [q + 2 kv][H] INT4
    std::unique_ptr<cuda::W4Linear> o;                 // [H][q]
    std::unique_ptr<cuda::W4Linear> gate_up;           // [2I][H] gate rows, then up rows
    std::unique_ptr<cuda::W4Linear> down;              // [H][I]
    cuda::DeviceBuffer<float> qkv_bias;                // [q + 2 kv] FP32 q|k|v biases (qwen2); empty: none
  };
  // One FP8 GEMM's B operand.
  struct Fp8Matrix {
    int n = 0, k = 0;
    cuda::DeviceBuffer<uint8_t> w;    // [n][k] E4M3 (K-major)
    cuda::DeviceBuffer<float> scale;  // [n] per output channel
    size_t bytes() const { return w.bytes() + scale.bytes(); }
  };
  struct Fp8Layer {
    Fp8Matrix qkv;   // [q + 2 kv][H], gain folded
    Fp8Matrix o;     // [H][q]
    Fp8Matrix gu;    // [2I][H] interleaved by row, gain folded
    Fp8Matrix down;  // [H][I]
  };

  // A loaded model: `q` holds the INT4 projections of every layer of `c` (a
  // tensor-parallel rank's shard and config); embedding, gains and head from
  // `model` (which must outlive the constructor only). lm_begin / lm_rows:
  // the LM head's vocabulary rows kept; max_m: the rows a GEMM takes.
  DeviceWeights(const Model& model, const ModelConfig& c, const quant::QuantizedWeights& q, int lm_begin,
                int lm_rows, int max_m);
  // A synthetic model of `c`'s shapes drawn on the device from `seed`, on `st`.
  DeviceWeights(const ModelConfig& c, uint64_t seed, int lm_begin, int lm_rows, int max_m, cudaStream_t st);
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // The prefill path's FP8 projections of `c`'s layers: from weights of format
  // fp8 (q/k/v and gate/up with the RMSNorm gain folded in, o and down plain:
  // quantize_model's fp8), or drawn on the device from `seed` on `st`.
  void load_fp8(const ModelConfig& c, const quant::QuantizedWeights& fp8);
  void draw_fp8(const ModelConfig& c, uint64_t seed, cudaStream_t st);
  bool has_fp8() const { return !fp8_.empty(); }
  bool fp8_synthetic() const { return fp8_synthetic_; }
  // The FP8 weights' stored initial activation amax per site (calibrated; empty: none stored).
  const std::map<SiteId, float>& fp8_initial_amax() const { return fp8_initial_amax_; }

  int n_layers() const { return int(layers_.size()); }
  const Layer& layer(int l) const { return layers_[size_t(l)]; }
  const Fp8Layer& fp8(int l) const { return fp8_[size_t(l)]; }
  const uint16_t* embd() const { return embd_.get(); }
  const uint16_t* out_norm() const { return out_norm_.get(); }
  // The LM head's rows [lm_begin, + lm_rows): its own copy, or the tied embedding's rows.
  const uint16_t* lm_head_rows() const;
  int lm_begin() const { return lm_begin_; }
  int lm_rows() const { return lm_rows_; }
  // The INT4 head (--head int4): the BF16 rows above quantized round-to-nearest
  // with FP16 scales per group of `group` inputs on the host's cores (copied
  // down, quantized, packed, uploaded: a synthetic model's drawn head too); the
  // BF16 rows stay (the embedding may be them). Its nibbles and scales
  // (quant::Int4Packed's order), or null before.
  void quantize_lm_head_int4(int group, cudaStream_t st);
  const uint8_t* lm_head_int4() const { return lm_int4_w_.size() ? lm_int4_w_.get() : nullptr; }
  const uint16_t* lm_head_int4_scales() const { return lm_int4_s_.get(); }
  int lm_head_int4_group() const { return lm_int4_group_; }

  size_t int4_bytes() const;  // the INT4 projections' weights and scales (what a decode step reads of them)
  size_t fp8_bytes() const;   // the FP8 projections' (what a prefill chunk reads)

 private:
  int hidden_ = 0, lm_begin_ = 0, lm_rows_ = 0;
  cuda::DeviceBuffer<uint16_t> embd_;       // [vocab][H] BF16
  cuda::DeviceBuffer<uint16_t> lm_head_;    // [lm_rows][H] BF16 (empty when tied: embd)
  cuda::DeviceBuffer<uint8_t> lm_int4_w_;   // [lm_rows * H / 2] INT4 head, fragment order (or empty)
  cuda::DeviceBuffer<uint16_t> lm_int4_s_;  // [lm_rows * H / group] FP16 scales, fragment order
  int lm_int4_group_ = 0;
  cuda::DeviceBuffer<uint16_t> out_norm_;  // [H] BF16
  std::vector<Layer> layers_;              // [layers]
  std::vector<Fp8Layer> fp8_;              // [layers] or empty
  bool fp8_synthetic_ = false;
  std::map<SiteId, float> fp8_initial_amax_;
};

}  // namespace futr::gpu
