// The GPU engine's FP8 prefill path (docs/ARCHITECTURE.md):
// packed prompt chunks (rows of several requests back to back, each request a
// run of consecutive positions after its prefix in the cache) through FP8
// GEMMs with fused epilogues, the prefill attention and delayed scaling on the
// device. Per chunk of M rows, with the BF16 residual x [M][H]:
//
//   x = E[token]                                            cuda::gather_rows
//   for each layer l:
//     a8 = e4m3(bf16(x / rms(x)) / s_attn)                  fp8_quantize_rows (fold_rms; gain folded in W)
//     qkv = bf16(s_attn b_s[n] a8 Wqkv8^T)                  gemm_scaled_out     [M][q + 2 kv]
//     RoPE(q, k); K/V -> the cache (BF16 + INT4 mirror)     kv_append_rows (many rows per CTA; the same
//                                                            bytes as the decode step's kv_append)
//     o = attention(q, cache)                               prefill_attention   [M][q]
//     a8 = e4m3(o / s_o); x = bf16(x + s_o b_s a8 Wo8^T)    fp8_quantize_rows, gemm_residual_sumsq
//     a8 = e4m3(bf16(x / rms(x)) / s_ffn)                   fp8_quantize_rows (fold_rms)
//     s8 = e4m3(silu(g) u / s_down)                         gemm_swiglu_fp8 (gate/up interleaved by row)
//     x = bf16(x + s_down b_s s8 Wdown8^T)                  gemm_residual_sumsq
//   the 4L sites' delayed-scaling update                    DeviceScaleBank::update (one launch)
// The engine then takes the rows that need outputs from x() through its
// decode path's final norm, LM head and reductions.
//
// The numerics are the CPU FP8 reference's with --fp8-rms cast (1/rms in the
// cast) and --fp8-numerics gpu (cpu_engine/quant_linear.h, cpu_engine/forward.h); what
// remains different: q/k/v rounded to BF16 before RoPE (the reference keeps
// FP32), the attention's BF16 P (reference/prefill_attention_ref.h), and the
// SwiGLU value cast to E4M3 from FP32 (the reference rounds it to BF16 first).
//
// FP8 activation scales: one DeviceScaleBank, 4 sites per layer
// (model/projection.h InputSite; site 4 l + InputSite); each chunk is one
// call of every site, as each Forward chunk is one call on the CPU. Static
// scaling (the commands' default): every site's scale is fixed (the
// normalized sites' sqrt(K) bound, the others' calibrated amax: stored in the
// .futr file, or calibrate() on the device at load), so a row's numbers depend
// on nothing else in its chunk or before it. Delayed scaling (the paper's):
// the engine gives every request its own bank (new_bank()) and runs chunks of
// one request, so no request moves another's scales; a call of the state
// machine is a window of max_rows positions of the request (cut however the
// scheduler likes: its chunks leave the call open until the window ends), so
// a request's numbers do not depend on how its prompt was cut into steps
// either. Policy "clamp" (the one a device state machine can run).
//
// Weights: FP8 E4M3 per output channel (quant/fp8_weights.h), the FP8
// projections of the engine's DeviceWeights (gpu_engine/device_weights.h:
// from QuantizedWeights of format fp8, quantized on load or a .futr file's
// fp8 set, or synthetic, drawn on the device, for benchmarks); the embedding
// and the KV cache (gpu_engine/kv_cache.h) are the decode step's own: the path
// borrows them and owns only its activations, row map and scale state.
// Profile: set_profiling() (futr bench --breakdown on prompt tests). The
// engine runs one warm-up chunk at construction, then reset_state().
// Tests: tests/gpu_engine/prefill_test.cpp (the engine with prefill against the CPU
// FP8 reference of the same numerics, chunking and packing, the INT4 mirror
// against the decode append's bytes, the profile, prefill then decode).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "quant/delayed_scaling.h"
#include "quant/quantized_model.h"

struct CUstream_st;

namespace futr::cuda {
class DeviceScaleBank;  // launch/fp8_scaling.h
}

namespace futr::gpu {

class DeviceWeights;  // gpu_engine/device_weights.h
class KvCache;        // gpu_engine/kv_cache.h
class Profiler;       // gpu_engine/profiler.h

class PrefillPath {
 public:
  // One request of a chunk: n_rows consecutive rows, positions pos0.., its
  // sequence's slot region at slot_base (a multiple of 16), or, in a paged
  // cache, its block table (host; the blocks of positions [0, pos0 + n_rows)
  // in order, docs/LAYOUTS.md "Paged KV cache"; then slot_base is unused).
  // The requests of a chunk are all paged or all contiguous.
  struct Request {
    int n_rows = 0, pos0 = 0, slot_base = 0;
    const int32_t* blocks = nullptr;
  };

  // Borrows the engine's weights (their FP8 projections: q/k/v and gate/up
  // with the RMSNorm gain folded in, o and down plain; the embedding), its KV
  // cache (layers and RoPE tables) and its count of non-finite K/V rows
  // (nonfinite, [1], added to); all must outlive the path. The FP8 sites'
  // initial amax: the weights' stored one where there is one (synthetic
  // weights: 64), the normalized sites' sqrt(K) bound.
  PrefillPath(const ModelConfig& c, const DeviceWeights& w, const KvCache& kv, int* nonfinite,
              const quant::DelayedScalingConfig& scaling, int max_rows, CUstream_st* st);
  ~PrefillPath();
  PrefillPath(const PrefillPath&) = delete;
  PrefillPath& operator=(const PrefillPath&) = delete;

  // Why this model cannot run the prefill path ("" if it can): head_dim 64 or 128, H <= 16384 ...
  static std::string unsupported_reason(const ModelConfig& c);

  int max_rows() const { return max_rows_; }
  size_t weight_bytes() const;  // the FP8 weights it reads (the borrowed weights' FP8 projections)
  // Runs the chunk (tokens: sum of the requests' rows <= max_rows, in request
  // order), asynchronously on st: K/V of every layer into the cache; the last
  // residual rows in x(). Token ids must be valid (the engine checked them).
  // bank: the FP8 scale state the chunk reads and records into (null: the
  // path's own; delayed scaling per request: the request's, new_bank()).
  // update: end the FP8 sites' call after the chunk (record it, set the next
  // scales); false leaves the call open, its records accumulating over the
  // next chunks (delayed scaling per request: one call per window of
  // positions, however the window was cut into chunks).
  void run(std::span<const int32_t> tokens, std::span<const Request> reqs, CUstream_st* st,
           cuda::DeviceScaleBank* bank = nullptr, bool update = true);
  // A fresh scale state of this path's configuration and initial amax (a
  // request's own state under delayed scaling).
  std::unique_ptr<cuda::DeviceScaleBank> new_bank() const;
  Fp8Scaling scaling() const;
  // Calibration on the device (weights quantized on load, no stored amax):
  // `tokens` in windows of `window` tokens, each a request from position 0 in
  // the slot region at slot_base (>= window slots no sequence uses), through
  // the path with a temporary delayed-scaling state; every site that casts
  // un-normalized rows (the O and down inputs) then takes the largest amax
  // recorded as its initial amax (its static scale under static scaling; the
  // normalized sites keep their sqrt(K) bound), and the path's state is reset.
  // Returns the sites' new initial amax; synchronizes st.
  std::vector<float> calibrate(std::span<const int32_t> tokens, int window, int slot_base, CUstream_st* st);
  const uint16_t* x() const;  // [max_rows][H] BF16: the residual rows of the last run()
  // Back to the state of a fresh path: every site's scale from its initial
  // amax, empty windows, counters zero (after a warm-up run; synchronizes st).
  void reset_state(CUstream_st* st);
  // The FP8 scaling state: counters summed over the sites (of the path's own
  // state and of `more`, the requests' own states), the largest amax, the
  // current scales' range (downloads: synchronizes st).
  nlohmann::json stats(CUstream_st* st, std::span<const cuda::DeviceScaleBank* const> more = {}) const;
  int64_t chunks() const { return chunks_; }
  int64_t rows() const { return rows_; }

  // Per-kernel profile: while on, run() records an event after every launch
  // (eager stream order: an interval is the kernel plus any launch gap before
  // it), and collect() (after the caller synchronized the stream) adds the
  // chunk's intervals per kind; profile() is {"chunks", "rows",
  // "us_per_chunk", "ops": [{"op", "us_per_chunk", "launches_per_chunk"}]}.
  void set_profiling(bool on);
  void collect();
  nlohmann::json profile() const;

 private:
  struct Impl;
  void allocate(const quant::DelayedScalingConfig& scaling, std::span<const float> initial_amax,
                CUstream_st* st);
  ModelConfig c_;
  const DeviceWeights& w_;
  const KvCache& kv_;
  int* nonfinite_;  // [1] device
  int max_rows_;
  int64_t chunks_ = 0, rows_ = 0;
  std::unique_ptr<Impl> m_;
  std::unique_ptr<Profiler> prof_;
};

}  // namespace futr::gpu
