#include "reference/fp8_gemm_ref.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::ref {

std::vector<float> decode_e4m3(std::span<const uint8_t> v) {
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = e4m3_to_float(uint8_t(i));
  std::vector<float> out(v.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < int64_t(v.size()); ++i) out[size_t(i)] = lut[v[size_t(i)]];
  return out;
}

std::vector<float> decode_bf16(std::span<const uint16_t> v) {
  std::vector<float> out(v.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < int64_t(v.size()); ++i) out[size_t(i)] = bf16_to_float(v[size_t(i)]);
  return out;
}

void gemm_rows(const float* A, const float* B, int N, int K, std::span<const int> rows, float* out) {
  const int64_t R = int64_t(rows.size());
  // Columns outermost: each B row is streamed once and reused for every A row.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < R; ++i) {
      const float* a = A + size_t(rows[size_t(i)]) * K;
      const float* b = B + size_t(n) * K;
      // 16 float lanes over blocks of 256 products (vectorizes; a block's
      // rounding error is ~256 * 2^-24 relative, far below any tolerance),
      // blocks summed in double.
      double total = 0;
      for (int kb = 0; kb < K; kb += 256) {
        const int ke = std::min(K, kb + 256);
        float p[16] = {};
        int k = kb;
        for (; k + 16 <= ke; k += 16)
          for (int j = 0; j < 16; ++j) p[j] += a[k + j] * b[k + j];
        for (; k < ke; ++k) p[0] += a[k] * b[k];
        double s = 0;
        for (float v : p) s += v;
        total += s;
      }
      out[size_t(i) * N + size_t(n)] = float(total);
    }
}

void col_scale(std::span<float> row, float a_scale, const float* b_scale) {
  for (size_t n = 0; n < row.size(); ++n) row[n] *= a_scale * (b_scale ? b_scale[n] : 1.0f);
}

void row_rms_factor(std::span<float> row, float sumsq, int hidden, float eps) {
  const double r = 1.0 / std::sqrt(double(sumsq) / hidden + eps);
  for (float& v : row) v = float(v * r);
}

void add_residual(std::span<float> row, const uint16_t* residual) {
  for (size_t n = 0; n < row.size(); ++n) row[n] += bf16_to_float(residual[n]);
}

void round_bf16(std::span<float> row) {
  for (float& v : row) v = futr::round_bf16(v);
}

double sum_squares(std::span<const float> row) {
  double s = 0;
  for (float v : row) s += double(v) * v;
  return s;
}

void swiglu_fp8(std::span<const float> row, float scale, uint8_t* out, Fp8Stats& stats) {
  FUTR_CHECK(row.size() % 2 == 0, "swiglu_fp8: odd row length {}", row.size());
  for (size_t i = 0; i < row.size() / 2; ++i) {
    const double g = row[2 * i], u = row[2 * i + 1];
    const float y = float(g / (1.0 + std::exp(-g)) * u);
    stats.amax = std::max(stats.amax, std::fabs(y));
    const float q = y / scale;
    stats.saturated += std::fabs(q) > kE4M3Max;
    out[i] = float_to_e4m3(q);
  }
}

void rope_rotate(std::span<float> head, int pos, const float* inv_freq) {
  const size_t half = head.size() / 2;
  for (size_t i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[i];  // FP32 product, as on the GPU and in HF
    const double c = std::cos(double(angle)), s = std::sin(double(angle));
    const double a = head[i], b = head[i + half];
    head[i] = float(a * c - b * s);
    head[i + half] = float(b * c + a * s);
  }
}

std::vector<float> rope_inv_freq_f32(int head_dim, float theta, const RopeScaling& scaling) {
  const std::vector<double> f = rope_inv_freq(head_dim, theta, scaling);
  return std::vector<float>(f.begin(), f.end());
}

RowInfo packed_row(std::span<const int> cu_rows, std::span<const int> start_pos,
                   std::span<const int> slot_base, int row) {
  const auto it = std::upper_bound(cu_rows.begin(), cu_rows.end(), row);
  const int b = int(it - cu_rows.begin()) - 1;
  FUTR_CHECK(b >= 0 && size_t(b) + 1 < cu_rows.size(), "packed_row: row {} outside the map", row);
  const int pos = start_pos[size_t(b)] + row - cu_rows[size_t(b)];
  return {b, pos, slot_base[size_t(b)] + pos};
}

RowInfo padded_row(std::span<const int> lengths, std::span<const int> start_pos,
                   std::span<const int> slot_base, int max_len, int row) {
  const int b = row / max_len, i = row % max_len;
  const int pos = start_pos[size_t(b)] + i;
  return {b, pos, i < lengths[size_t(b)] ? slot_base[size_t(b)] + pos : -1};
}

std::vector<float> scaled_out_row(std::span<const float> acc, float a_scale, const float* b_scale) {
  std::vector<float> r(acc.begin(), acc.end());
  col_scale(r, a_scale, b_scale);
  return r;
}

std::vector<float> residual_sumsq_row(std::span<const float> acc, float a_scale, const float* b_scale,
                                      const uint16_t* residual, double& sumsq) {
  std::vector<float> r(acc.begin(), acc.end());
  col_scale(r, a_scale, b_scale);
  add_residual(r, residual);
  round_bf16(r);
  sumsq = sum_squares(r);
  return r;
}

std::vector<float> rms_scaled_out_row(std::span<const float> acc, float a_scale, const float* b_scale,
                                      float sumsq, int hidden, float eps) {
  std::vector<float> r(acc.begin(), acc.end());
  col_scale(r, a_scale, b_scale);
  row_rms_factor(r, sumsq, hidden, eps);
  return r;
}

void swiglu_fp8_row(std::span<const float> acc, float a_scale, const float* b_scale, float scale,
                    uint8_t* out, Fp8Stats& stats) {
  std::vector<float> r(acc.begin(), acc.end());
  col_scale(r, a_scale, b_scale);
  swiglu_fp8(r, scale, out, stats);
}

std::vector<float> qkv_rope_row(std::span<const float> acc, float a_scale, const float* b_scale, int pos,
                                const float* inv_freq, int heads, int kv_heads, int head_dim) {
  std::vector<float> r(acc.begin(), acc.end());
  col_scale(r, a_scale, b_scale);
  for (int h = 0; h < heads + kv_heads; ++h)
    rope_rotate(std::span<float>(r).subspan(size_t(h) * head_dim, size_t(head_dim)), pos, inv_freq);
  return r;
}

}  // namespace futr::ref
