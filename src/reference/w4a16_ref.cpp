#include "reference/w4a16_ref.h"

#include <vector>

#include "core/error.h"
#include "core/numeric.h"

namespace futr::ref {

namespace {
std::vector<double> to_double(std::span<const uint16_t> x) {
  std::vector<double> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf16_to_float(x[i]);
  return v;
}
template <class F>
void for_rows(int n, std::span<const int> rows, F&& f) {
  if (rows.empty())
    for (int r = 0; r < n; ++r) f(r);
  else
    for (int r : rows) f(r);
}
}  // namespace

void w4a16(const quant::Int4Weights& w, std::span<const uint16_t> x, int m, std::span<float> y,
           std::span<const int> rows) {
  FUTR_CHECK(x.size() == size_t(m) * w.k && y.size() == size_t(m) * w.n,
             "ref::w4a16: x has {} values and y {}, expected {} and {}", x.size(), y.size(), size_t(m) * w.k,
             size_t(m) * w.n);
  const std::vector<double> xd = to_double(x);
  const int ng = w.k / w.group;
  for_rows(w.n, rows, [&](int r) {
    const int8_t* q = w.q.data() + size_t(r) * w.k;
    for (int i = 0; i < m; ++i) {
      const double* xr = xd.data() + size_t(i) * w.k;
      double acc = 0;
      for (int g = 0; g < ng; ++g) {
        double part = 0;
        for (int k = g * w.group; k < (g + 1) * w.group; ++k) part += xr[k] * q[k];
        acc += part * double(fp16_to_float(w.scale[size_t(r) * ng + g]));
      }
      y[size_t(i) * w.n + r] = float(acc);
    }
  });
}

void w8a16(int n, int k, std::span<const uint8_t> e4m3, std::span<const float> scale,
           std::span<const uint16_t> x, int m, std::span<float> y, std::span<const int> rows) {
  FUTR_CHECK(e4m3.size() == size_t(n) * k && scale.size() == size_t(n) && x.size() == size_t(m) * k &&
                 y.size() == size_t(m) * n,
             "ref::w8a16: operand sizes do not match N = {}, K = {}, M = {}", n, k, m);
  const std::vector<double> xd = to_double(x);
  std::vector<double> wr(k);
  for_rows(n, rows, [&](int r) {
    for (int c = 0; c < k; ++c) wr[c] = e4m3_to_float(e4m3[size_t(r) * k + c]);
    for (int i = 0; i < m; ++i) {
      const double* xr = xd.data() + size_t(i) * k;
      double acc = 0;
      for (int c = 0; c < k; ++c) acc += xr[c] * wr[c];
      y[size_t(i) * n + r] = float(acc * double(scale[r]));
    }
  });
}

}  // namespace futr::ref
