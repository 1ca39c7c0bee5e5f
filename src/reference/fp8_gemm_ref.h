// CPU reference of the FP8 prefill GEMM and its epilogue policies
// (src/kernels/sm90_fp8_gemm.cuh, src/kernels/epilogue/). Plain C++, the
// spec the GPU kernels are tested against (tests/kernels/fp8_gemm_test.cpp).
//
// Core: acc[i, n] = sum_k A[rows[i], k] * B[n, k] with the decoded E4M3/BF16
// values (each product is exact in float), accumulated in float over blocks of
// 256 and in double across blocks (relative error ~1e-5, far below the GPU's
// tolerances), for a chosen
// subset of rows (the tests sample rows of the huge shapes) and all N columns.
// Epilogue ops work on one output row of FP32 values, mirroring the device ops
// one for one; the policy functions compose them in the order of
// src/kernels/epilogue/policies.cuh.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/rope.h"

namespace futr::ref {

// ---- operands ---------------------------------------------------------------
std::vector<float> decode_e4m3(std::span<const uint8_t> v);
std::vector<float> decode_bf16(std::span<const uint16_t> v);

// out[i * N + n] = sum_k A[rows[i] * K + k] * B[n * K + k]  (blockwise float,
// double across blocks; OpenMP over columns). A: [M, K], B: [N, K], out: [rows.size(), N].
void gemm_rows(const float* A, const float* B, int N, int K, std::span<const int> rows, float* out);

// ---- epilogue ops (one row) ---------------------------------------------------
// row[n] *= a_scale * b_scale[n]   (b_scale may be null: 1)
void col_scale(std::span<float> row, float a_scale, const float* b_scale);
// row[n] *= 1 / sqrt(sumsq / hidden + eps)
void row_rms_factor(std::span<float> row, float sumsq, int hidden, float eps);
// row[n] += bf16 residual[n]
void add_residual(std::span<float> row, const uint16_t* residual);
// row[n] = bf16(row[n]) (what a BF16 store keeps)
void round_bf16(std::span<float> row);
// sum_n row[n]^2 in double
double sum_squares(std::span<const float> row);

struct Fp8Stats {
  float amax = 0;          // max |y|
  uint32_t saturated = 0;  // count of |y / scale| > 448
};
// row holds interleaved pairs (g_i, u_i) at (2i, 2i+1); out[i] = e4m3(silu(g_i) u_i / scale).
void swiglu_fp8(std::span<const float> row, float scale, uint8_t* out, Fp8Stats& stats);

// Hugging Face rotate-half RoPE of one head (D values) at position pos:
// x[i], x[i + D/2] rotated by angle float(pos) * inv_freq[i] (an FP32 product).
void rope_rotate(std::span<float> head, int pos, const float* inv_freq);

// The inverse frequencies the kernel takes: model/rope.h's rope_inv_freq (the
// one home of the RoPE spec, llama3 scaling included) rounded to FP32.
std::vector<float> rope_inv_freq_f32(int head_dim, float theta, const RopeScaling& scaling);

// ---- row maps (QKV policy) ------------------------------------------------------
struct RowInfo {
  int request;  // request the row belongs to
  int pos;      // RoPE position
  int slot;     // KV-cache slot, -1 for a padding row
};
// Packed: request b owns rows [cu_rows[b], cu_rows[b+1]); pos = start_pos[b] + row - cu_rows[b];
// slot = slot_base[b] + pos.
RowInfo packed_row(std::span<const int> cu_rows, std::span<const int> start_pos,
                   std::span<const int> slot_base, int row);
// Padded: b = row / max_len, i = row % max_len; pos = start_pos[b] + i; slot = -1 if i >= lengths[b].
RowInfo padded_row(std::span<const int> lengths, std::span<const int> start_pos,
                   std::span<const int> slot_base, int max_len, int row);

// ---- policies (acc: one row of raw A*B^T sums, N values) ----------------------
// ScaledOut: a_s b_s[n] acc[n] (unrounded; the GPU stores it as BF16).
std::vector<float> scaled_out_row(std::span<const float> acc, float a_scale, const float* b_scale);
// ResidualSumSq: bf16(residual + a_s b_s[n] acc[n]) and the sum of squares of that.
std::vector<float> residual_sumsq_row(std::span<const float> acc, float a_scale, const float* b_scale,
                                      const uint16_t* residual, double& sumsq);
// RmsScaledOut: a_s b_s[n] acc[n] / sqrt(sumsq / hidden + eps).
std::vector<float> rms_scaled_out_row(std::span<const float> acc, float a_scale, const float* b_scale,
                                      float sumsq, int hidden, float eps);
// SwiGluFp8: out[i] = e4m3(silu(g_i) u_i / scale) after the column scaling.
void swiglu_fp8_row(std::span<const float> acc, float a_scale, const float* b_scale, float scale,
                    uint8_t* out, Fp8Stats& stats);
// QkvRope: scaled row with q and k heads rotated at `pos` (v untouched).
std::vector<float> qkv_rope_row(std::span<const float> acc, float a_scale, const float* b_scale, int pos,
                                const float* inv_freq, int heads, int kv_heads, int head_dim);

}  // namespace futr::ref
