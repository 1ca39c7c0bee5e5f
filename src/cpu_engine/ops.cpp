// The forward pass's building blocks (formulas in ops.h).
#include "cpu_engine/ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "core/error.h"
#include "cpu_engine/threads.h"

namespace futr::cpu {

// Elementwise steps smaller than this run on the calling thread (a parallel
// region costs a few microseconds; a decode step's vectors are ~1000 values).
constexpr int64_t kParallelMin = 1 << 14;

void embed(const float* table, int64_t vocab, int hidden, std::span<const int32_t> tokens, float* x) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    FUTR_CHECK(t >= 0 && t < vocab, "token id {} at position {} is outside the vocabulary (0..{})", t, i,
               vocab - 1);
    std::memcpy(x + i * size_t(hidden), table + size_t(t) * size_t(hidden), sizeof(float) * size_t(hidden));
  }
}

void rmsnorm(const float* x, const float* g, float* y, int64_t n, int d, float eps) {
#pragma omp parallel for schedule(static) if (n * d >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    double ss = 0.0;
    for (int j = 0; j < d; ++j) ss += double(xi[j]) * double(xi[j]);
    const float r = float(1.0 / std::sqrt(ss / d + double(eps)));
    for (int j = 0; j < d; ++j) yi[j] = xi[j] * r * g[j];
  }
}

void apply_rope(float* x, int64_t n, int heads, int64_t ld, int pos0, const RopeTable& table) {
  const int D = table.head_dim, half = D / 2;
  FUTR_CHECK(pos0 >= 0 && pos0 + n <= table.max_pos, "RoPE: positions {}..{} exceed the table ({} positions)",
             pos0, pos0 + n - 1, table.max_pos);
#pragma omp parallel for schedule(static) if (n * heads * D >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* c = table.cos.data() + size_t(pos0 + i) * size_t(half);
    const float* s = table.sin.data() + size_t(pos0 + i) * size_t(half);
    for (int h = 0; h < heads; ++h) {
      float* v = x + i * ld + int64_t(h) * D;
      for (int j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * c[j] - b * s[j];
        v[j + half] = b * c[j] + a * s[j];
      }
    }
  }
}

void causal_attention(const float* q, int64_t ldq, int n, int pos0, int n_heads, int head_dim,
                      const KvLayerView& kv, float* out, int64_t ldo, AttentionScratch& scratch) {
  const int n_kv = int(kv.heads.size());
  FUTR_ASSERT(n_kv > 0 && n_heads % n_kv == 0);
  FUTR_ASSERT(kv.len == pos0 + n);
  const int group = n_heads / n_kv;  // query heads per KV head
  const float scale = float(1.0 / std::sqrt(double(head_dim)));
  constexpr int kBlock = 128;  // query rows per GEMM block
  const int blocks = (n + kBlock - 1) / kBlock;
  const int tasks = n_heads * blocks;  // one task: one head, one block of query rows
  scratch.scores.resize(size_t(omp_get_max_threads()));
  ensure_single_threaded_blas();

  // Multiply-adds of Q K^T and A V over all heads (causal half ignored);
  // small problems (tiny models, short decode steps) stay on one thread.
  const int64_t work = int64_t(n_heads) * n * kv.len * head_dim * 2;
#pragma omp parallel if (work >= (int64_t(1) << 18))
  {
    std::vector<float>& S_buf = scratch.scores[size_t(omp_get_thread_num())];
    S_buf.resize(size_t(std::min(n, kBlock)) * size_t(kv.len));
    // Largest blocks (the last rows see the most keys) first.
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int h = task % n_heads, b = blocks - 1 - task / n_heads;
      const KvHeadView& g = kv.heads[size_t(h / group)];
      const int i0 = b * kBlock;
      const int rows = std::min(kBlock, n - i0);
      const int keys = pos0 + i0 + rows;  // keys visible to the block's last row
      float* S = S_buf.data();            // [rows, keys]
      // S = scale * Q_h[i0:i0+rows] K_g[0:keys]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, head_dim, scale,
                  q + int64_t(i0) * ldq + int64_t(h) * head_dim, blasint(ldq), g.k, blasint(g.ld), 0.0f, S,
                  keys);
      // Causal softmax per row: row r (position pos0 + i0 + r) sees keys 0..pos0+i0+r.
      for (int r = 0; r < rows; ++r) {
        float* s = S + size_t(r) * size_t(keys);
        const int visible = pos0 + i0 + r + 1;
        float mx = -std::numeric_limits<float>::infinity();
        for (int t = 0; t < visible; ++t) mx = std::max(mx, s[t]);
        double sum = 0.0;
        for (int t = 0; t < visible; ++t) {
          s[t] = std::exp(s[t] - mx);
          sum += s[t];
        }
        const float inv = float(1.0 / sum);
        for (int t = 0; t < visible; ++t) s[t] *= inv;
        for (int t = visible; t < keys; ++t) s[t] = 0.0f;  // masked (future) keys
      }
      // O_h[i0:i0+rows] = A V_g[0:keys]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, keys, 1.0f, S, keys, g.v,
                  blasint(g.ld), 0.0f, out + int64_t(i0) * ldo + int64_t(h) * head_dim, blasint(ldo));
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t count) {
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t count) {
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace futr::cpu
