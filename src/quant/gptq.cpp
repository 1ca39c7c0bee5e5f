// GPTQ (see gptq.h): Cholesky of the damped inverse Hessian (OpenBLAS
// LAPACK), then per chunk of rows the blocked column sweep.
#include "quant/gptq.h"

#include <cblas.h>
#include <f77blas.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::quant {

namespace {

// In-place Cholesky of a symmetric positive-definite row-major matrix a [k, k]:
// on success the upper triangle holds R with A = R^T R (row-major). LAPACK is
// column-major: the row-major buffer is A^T = A, and the column-major lower
// factor L (A = L L^T) read row-major is L^T = R, upper.
bool cholesky_upper(std::vector<double>& a, int k) {
  char uplo = 'L';
  blasint n = k, lda = k, info = 0;
  dpotrf_(&uplo, &n, a.data(), &lda, &info);
  return info == 0;
}

// a [k, k] holds R from cholesky_upper; replaces it with the full symmetric A^-1.
bool inverse_from_cholesky(std::vector<double>& a, int k) {
  char uplo = 'L';
  blasint n = k, lda = k, info = 0;
  dpotri_(&uplo, &n, a.data(), &lda, &info);
  if (info != 0) return false;
  // dpotri wrote the column-major lower triangle = the row-major upper one.
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < i; ++j) a[size_t(i) * k + j] = a[size_t(j) * k + i];
  return true;
}

// U, upper, with (H + damp)^-1 = U^T U; H is permuted already. Retries with
// 10x the damping when a factorization fails.
std::vector<double> inverse_cholesky(const std::vector<double>& h, int k, double damp,
                                     const std::string& name) {
  double mean_diag = 0.0;
  for (int i = 0; i < k; ++i) mean_diag += h[size_t(i) * k + i];
  mean_diag /= k;
  for (int attempt = 0; attempt < 5; ++attempt, damp *= 10.0) {
    std::vector<double> a = h;
    for (int i = 0; i < k; ++i) a[size_t(i) * k + i] += damp * mean_diag;
    if (!cholesky_upper(a, k) || !inverse_from_cholesky(a, k) || !cholesky_upper(a, k)) continue;
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < i; ++j) a[size_t(i) * k + j] = 0.0;  // keep only U
    return a;
  }
  fail(
      "{}: GPTQ: the calibration Hessian is not positive definite even with damping {} "
      "(too few calibration tokens?)",
      name, damp);
}

}  // namespace

Int4Weights gptq_quantize(std::span<const float> w_in, int n, int k, std::span<const double> hessian,
                          const GptqOptions& o, const std::string& name) {
  const int G = o.group ? o.group : int4_group_for(k, name);
  FUTR_CHECK(n > 0 && (G == 64 || G == 128) && k % G == 0, "{}: GPTQ: [{}, {}] with group {}", name, n, k, G);
  FUTR_CHECK(w_in.size() == size_t(n) * size_t(k), "{}: GPTQ: {} weights for [{}, {}]", name, w_in.size(), n,
             k);
  FUTR_CHECK(hessian.size() == size_t(k) * size_t(k), "{}: GPTQ: Hessian of {} values for K = {}", name,
             hessian.size(), k);
  FUTR_CHECK(o.block >= G && o.block % G == 0, "{}: GPTQ block {} must be a multiple of group {}", name,
             o.block, G);
  FUTR_CHECK(o.damp > 0.0 && o.damp < 10.0, "{}: GPTQ damping {} out of range", name, o.damp);
  const size_t K = size_t(k);
  openblas_set_num_threads(1);  // one thread pool: OpenMP (rows in parallel below)

  // --- dead inputs, permutation ---------------------------------------------------------
  std::vector<double> h(hessian.begin(), hessian.end());
  std::vector<float> w(w_in.begin(), w_in.end());
  for (size_t i = 0; i < K; ++i) {
    FUTR_CHECK(std::isfinite(h[i * K + i]) && h[i * K + i] >= 0.0, "{}: GPTQ: Hessian diagonal {} is {}",
               name, i, h[i * K + i]);
    if (h[i * K + i] == 0.0) {
      h[i * K + i] = 1.0;
      for (size_t r = 0; r < size_t(n); ++r) w[r * K + i] = 0.0f;
    }
  }
  std::vector<int> perm(K);
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order)
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int a, int b) { return h[size_t(a) * K + a] > h[size_t(b) * K + b]; });
  std::vector<double> hp(K * K);
  for (size_t i = 0; i < K; ++i)
    for (size_t j = 0; j < K; ++j) hp[i * K + j] = h[size_t(perm[i]) * K + size_t(perm[j])];
  const std::vector<double> U = inverse_cholesky(hp, k, o.damp, name);

  Int4Weights out{n, k, G, std::vector<int8_t>(size_t(n) * K), std::vector<uint16_t>(size_t(n) * (K / G))};
  const int groups = k / G;
  // Static groups for act-order: scales from the (dead-zeroed) weights before any update.
  // Per-input error weights of the clipping search: H_kk (original order).
  std::vector<float> hdiag;
  if (o.clip.enabled && o.clip_weighted)
    for (size_t i = 0; i < K; ++i) hdiag.push_back(float(h[i * K + i]));
  if (o.act_order) {
    const Int4Weights s = quantize_int4(w, n, k, G, o.clip, hdiag, name);
    out.scale = s.scale;
  }

  // --- the sweep, per chunk of rows ------------------------------------------------------
  constexpr int kRows = 16;
  const int chunks = (n + kRows - 1) / kRows;
  std::exception_ptr error;  // NOTE: exceptions must not leave the OpenMP region
#pragma omp parallel
  {
    std::vector<double> W(size_t(kRows) * K), E(size_t(kRows) * size_t(o.block));
    std::vector<float> gw(static_cast<size_t>(G));
    std::vector<int8_t> gq(static_cast<size_t>(G));
#pragma omp for schedule(dynamic, 1)
    for (int ch = 0; ch < chunks; ++ch) {
      try {
        const int r0 = ch * kRows, rows = std::min(kRows, n - r0);
        for (int r = 0; r < rows; ++r)
          for (size_t j = 0; j < K; ++j)
            W[size_t(r) * K + j] = double(w[size_t(r0 + r) * K + size_t(perm[j])]);
        for (int i1 = 0; i1 < k; i1 += o.block) {
          const int i2 = std::min(k, i1 + o.block), bw = i2 - i1;
          for (int i = i1; i < i2; ++i) {
            const int orig = perm[size_t(i)], g = orig / G;
            const double d = U[size_t(i) * K + size_t(i)];
            for (int r = 0; r < rows; ++r) {
              double* row = &W[size_t(r) * K];
              uint16_t& s16 = out.scale[size_t(r0 + r) * size_t(groups) + size_t(g)];
              if (!o.act_order && i % G == 0) {
                // Group start (plain order: the group is inputs i..i+G-1, all in this block
                // and already updated): choose its scale now.
                for (int t = 0; t < G; ++t) gw[size_t(t)] = float(row[i + t]);
                const std::span<const float> d =
                    hdiag.empty() ? std::span<const float>()
                                  : std::span<const float>(hdiag).subspan(size_t(i), size_t(G));
                s16 = int4_quantize_group(gw, d, o.clip, gq);
              }
              const float s = fp16_to_float(s16);
              const int8_t q = int4_quantize_value(float(row[i]), s);
              out.q[size_t(r0 + r) * K + size_t(orig)] = q;
              const double err = (row[i] - double(q) * double(s)) / d;
              E[size_t(r) * size_t(o.block) + size_t(i - i1)] = err;
              // Eager update of the rest of the block.
              const double* u = &U[size_t(i) * K];
              for (int j = i + 1; j < i2; ++j) row[j] -= err * u[j];
            }
          }
          // Lazy update of everything after the block: W[:, i2:] -= E[:, :bw] U[i1:i2, i2:].
          if (i2 < k)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, k - i2, bw, -1.0, E.data(), o.block,
                        &U[size_t(i1) * K + size_t(i2)], k, 1.0, &W[size_t(i2)], k);
        }
      } catch (...) {
#pragma omp critical(futr_gptq_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

double hessian_output_error(std::span<const float> w, const Int4Weights& q, std::span<const double> hessian) {
  const size_t K = size_t(q.k);
  FUTR_CHECK(w.size() == size_t(q.n) * K && hessian.size() == K * K,
             "hessian_output_error: shapes do not match");
  const std::vector<float> d = dequantize_int4(q);
  double total = 0.0;
  std::vector<double> e(K), he(K);
  for (size_t r = 0; r < size_t(q.n); ++r) {
    for (size_t j = 0; j < K; ++j) e[j] = double(w[r * K + j]) - double(d[r * K + j]);
    for (size_t i = 0; i < K; ++i) {
      double s = 0.0;
      for (size_t j = 0; j < K; ++j) s += hessian[i * K + j] * e[j];
      he[i] = s;
    }
    for (size_t i = 0; i < K; ++i) total += e[i] * he[i];
  }
  return total;
}

}  // namespace futr::quant
