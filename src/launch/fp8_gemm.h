// FP8 (and BF16) prefill GEMM with fused epilogues: the host interface of
// src/kernels/sm90_fp8_gemm.cuh.
//
//   C[M, N] = A[M, K] x B[N, K]^T   (FP32 accumulation on WGMMA), then one epilogue:
//
// Accumulation (E4M3 inputs): by default the tensor cores' sum of each 128-wide
// K stage is added into FP32 registers ("promoted": the FP8 WGMMA accumulator
// keeps fewer bits than FP32, so the error of a long K sum grows with K);
// GemmConfig::fast_accum keeps the whole K sum in the accumulator (cuBLASLt's
// fast-accumulation mode; the variants without the promotion). BF16 inputs
// accumulate in FP32 either way.
//
//   gemm_scaled_out      out = bf16(a_s * b_s[n] * C)                          plain GEMM
//   gemm_residual_sumsq  out = bf16(residual + a_s b_s[n] C); sumsq[m] = sum_n out^2   O / down
//   gemm_rms_scaled_out  out = bf16(a_s b_s[n] C / sqrt(sumsq[m]/hidden + eps))       folded RMSNorm
//   gemm_swiglu_fp8      out = e4m3(silu(g) u / s), amax, saturation                 gate/up
//   gemm_qkv_rope        RoPE(q, k); q -> q_out; k, v -> BF16 cache slots             QKV
//
// Operands (docs/LAYOUTS.md "FP8 GEMM operands"): A [M, K] row-major, B [N, K]
// row-major (K-major weights), both E4M3 (or both BF16 for the comparison
// path, GemmInput::kBF16), 16-byte aligned, K % 16 == 0 (E4M3) or % 8 (BF16),
// N % 8 == 0. BF16 tensors are passed as uint16_t bit patterns. Scales are
// device pointers so that a CUDA graph can capture the call. All calls are
// asynchronous on `stream`; a shape or configuration outside the compiled list
// throws futr::Error naming the supported variants (before touching the GPU).
//
// Configuration: choose_gemm_config() is the heuristic (tile shape from the
// problem and the SM count); pass a GemmConfig to override it (bench flags
// --bn --stages --pingpong --group-m --grid). Compiled variants: gemm_variants(),
// the table in launch/fp8_gemm_variants.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string>

namespace futr::cuda {

enum class GemmInput { kE4M3, kBF16 };
enum class GemmEpilogue {
  kScaledOut,
  kResidualSumSq,
  kRmsScaledOut,
  kSwiGluFp8,
  kQkvRopePacked,
  kQkvRopePadded
};

struct GemmConfig {
  int bm = 128;             // CTA tile rows (two consumer warpgroups x 64); only 128 is compiled
  int bn = 256;             // CTA tile columns: 256 or 128
  int stages = 4;           // TMA pipeline depth
  int group_m = 8;          // rasterization: M-tiles per group (L2 reuse); >= 1
  int grid = 0;             // persistent CTAs; 0 = min(tiles, SM count)
  bool pingpong = false;    // consumer schedule: false = cooperative (both warpgroups on one tile),
                            // true = ping-pong (alternate tiles; epilogue overlaps MMAs; bn = 128)
  bool fast_accum = false;  // E4M3: the whole K sum in the WGMMA accumulator (no FP32 promotion)
};

// One compiled kernel instance (a row of kGemmVariants, launch/fp8_gemm_variants.h).
struct GemmVariant {
  GemmEpilogue epilogue;
  GemmInput input;
  int bm, bn, stages;
  bool pingpong;
  bool promoted = false;  // E4M3: each K stage's tensor-core sum added into FP32 registers
  friend constexpr bool operator==(const GemmVariant&, const GemmVariant&) = default;
};

// The explicit list of compiled (epilogue, input, tile) variants: the table in
// launch/fp8_gemm_variants.h, the one place it is written.
std::span<const GemmVariant> gemm_variants();
// The compiled variant of (epilogue, input) closest to `c` (tile shape, stages,
// schedule); nullptr when that (epilogue, input) has none. What the error for
// an uncompiled configuration names.
const GemmVariant* nearest_gemm_variant(GemmEpilogue e, GemmInput in, const GemmConfig& c);
std::string to_string(const GemmVariant& v);  // "128x256 stages 4" (+ " ping-pong", " promoted")
std::string to_string(GemmEpilogue e);
std::string to_string(GemmInput i);
std::string to_string(const GemmConfig& c);

// The heuristic: among the compiled tiles of (epilogue, input) and the
// accumulation mode (promoted unless fast_accum; BF16 inputs: every tile), the
// one with the best estimated wave efficiency on `sm_count` SMs; ties go to the
// larger tile (fewer bytes per FLOP). Throws if no variant exists.
GemmConfig choose_gemm_config(GemmEpilogue e, GemmInput in, int M, int N, int K, int sm_count,
                              bool fast_accum = false);

struct GemmOperands {
  const void* a = nullptr;  // [M, K] E4M3 (or BF16) row-major
  const void* b = nullptr;  // [N, K] E4M3 (or BF16) row-major (K-major weights)
  int M = 0, N = 0, K = 0;
  GemmInput input = GemmInput::kE4M3;
};

// Dequantization scales common to every epilogue: C *= a_scale[0] * b_scale[n].
struct GemmScales {
  const float* a_scale = nullptr;  // [1] per-tensor A scale (nullptr: 1)
  const float* b_scale = nullptr;  // [N] per-output-channel B scale (nullptr: 1)
};

struct ScaledOutArgs {
  GemmScales scales;
  uint16_t* out = nullptr;  // [M, ld_out] BF16
  int ld_out = 0;           // 0: N
};

struct ResidualSumSqArgs {
  GemmScales scales;
  const uint16_t* residual = nullptr;  // [M, ld_res] BF16; may equal out (in place)
  int ld_res = 0;                      // 0: N
  uint16_t* out = nullptr;             // [M, ld_out] BF16 = residual + C
  int ld_out = 0;                      // 0: N
  float* row_sumsq = nullptr;          // [M] sum over n of out^2 (zeroed by the call)
};

struct RmsScaledOutArgs {
  GemmScales scales;
  const float* row_sumsq = nullptr;  // [M] sums of squares of the GEMM's input rows x (un-normalized)
  int hidden = 0;                    // the RMSNorm's dimension (mean divisor), usually K
  float eps = 1e-5f;                 // RMSNorm epsilon
  uint16_t* out = nullptr;           // [M, ld_out] BF16
  int ld_out = 0;                    // 0: N
};

// Delayed-scaling FP8 output; see src/kernels/epilogue/swiglu_fp8.cuh for the contract.
struct SwiGluFp8Args {
  GemmScales scales;                   // b_scale is in the interleaved column order
  uint8_t* out = nullptr;              // [M, ld_out] E4M3, N/2 columns
  int ld_out = 0;                      // bytes; 0: N / 2
  const float* scale_in = nullptr;     // [1] dequantization scale s of this call (from the previous amax)
  float* amax_out = nullptr;           // [1] max |silu(g) u| of this call (max-reduced; caller zeroes)
  uint32_t* saturation_out = nullptr;  // [1] count of |y / s| > 448 (added to; caller zeroes)
};

// Packed rows: R variable-length requests concatenated (M = cu_rows[R]).
struct PackedRowMap {
  const int* cu_rows = nullptr;    // [R+1] device: prefix sum of request lengths, cu_rows[0] = 0
  const int* start_pos = nullptr;  // [R] device: position of each request's first row
  const int* slot_base = nullptr;  // [R] device: cache slot of each request's position 0
  int num_requests = 0;            // R
};
// Padded rows: R requests, max_len rows each (M = R * max_len).
struct PaddedRowMap {
  const int* lengths = nullptr;    // [R] device: valid rows per request (<= max_len)
  const int* start_pos = nullptr;  // [R] device
  const int* slot_base = nullptr;  // [R] device
  int num_requests = 0;            // R
  int max_len = 0;                 // padded rows per request
};

struct QkvRopeArgs {
  GemmScales scales;
  const float* inv_freq = nullptr;  // [head_dim/2] device: RoPE inverse frequencies (theta, llama3 scaling)
  int heads = 0, kv_heads = 0;      // N must be (heads + 2 kv_heads) * head_dim
  int head_dim = 0;                 // 64 or 128
  uint16_t* q_out = nullptr;        // [M, ld_q] BF16 rotated q
  int ld_q = 0;                     // 0: heads * head_dim
  uint16_t* k_cache = nullptr;      // [num_slots, kv_heads, head_dim] BF16 (docs/LAYOUTS.md)
  uint16_t* v_cache = nullptr;      // [num_slots, kv_heads, head_dim] BF16
  int num_slots = 0;                // cache capacity
};

void gemm_scaled_out(const GemmOperands& op, const ScaledOutArgs& args, cudaStream_t stream,
                     const GemmConfig* config = nullptr);
void gemm_residual_sumsq(const GemmOperands& op, const ResidualSumSqArgs& args, cudaStream_t stream,
                         const GemmConfig* config = nullptr);
void gemm_rms_scaled_out(const GemmOperands& op, const RmsScaledOutArgs& args, cudaStream_t stream,
                         const GemmConfig* config = nullptr);
void gemm_swiglu_fp8(const GemmOperands& op, const SwiGluFp8Args& args, cudaStream_t stream,
                     const GemmConfig* config = nullptr);
void gemm_qkv_rope(const GemmOperands& op, const QkvRopeArgs& args, const PackedRowMap& rows,
                   cudaStream_t stream, const GemmConfig* config = nullptr);
void gemm_qkv_rope(const GemmOperands& op, const QkvRopeArgs& args, const PaddedRowMap& rows,
                   cudaStream_t stream, const GemmConfig* config = nullptr);

}  // namespace futr::cuda
