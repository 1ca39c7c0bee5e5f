#include "quant/int4_pack.h"

#include <algorithm>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/layout/int4_fragment.cuh"

namespace futr::quant {

float Int4Weights::dequant(int row, int col) const {
  return float(q[size_t(row) * k + col]) * fp16_to_float(scale[size_t(row) * (k / group) + col / group]);
}

void check_int4_shape(int n, int k, int group) {
  FUTR_CHECK(group == 64 || group == 128, "INT4 packing: group size {} not supported (64 or 128)", group);
  FUTR_CHECK(n > 0 && n % layout::kTileN == 0, "INT4 packing: N = {} must be a positive multiple of 16", n);
  FUTR_CHECK(k > 0 && k % layout::kChunkK == 0, "INT4 packing: K = {} must be a positive multiple of 64", k);
  FUTR_CHECK(k % group == 0, "INT4 packing: K = {} is not a multiple of the group size {} (use group 64)", k,
             group);
}

Int4Packed pack_int4(const Int4Weights& w) {
  check_int4_shape(w.n, w.k, w.group);
  const size_t nk = size_t(w.n) * w.k, ng = size_t(w.n) * (w.k / w.group);
  FUTR_CHECK(w.q.size() == nk && w.scale.size() == ng,
             "pack_int4: {} values and {} scales given, {} and {} expected", w.q.size(), w.scale.size(), nk,
             ng);
  Int4Packed p{w.n, w.k, w.group, std::vector<uint8_t>(nk / 2, 0), std::vector<uint16_t>(ng, 0)};
  for (int r = 0; r < w.n; ++r)
    for (int c = 0; c < w.k; ++c) {
      const int q = w.q[size_t(r) * w.k + c];
      FUTR_CHECK(q >= -8 && q <= 7, "pack_int4: q[{}, {}] = {} outside [-8, 7]", r, c, q);
      const layout::Int4Pos pos = layout::int4_position(w.n, w.k, r, c);
      p.weights[pos.byte] |= uint8_t((q + 8) << pos.shift);
    }
  for (int r = 0; r < w.n; ++r)
    for (int gi = 0; gi < w.k / w.group; ++gi)
      p.scales[layout::int4_scale_index(w.k, w.group, r, gi)] = w.scale[size_t(r) * (w.k / w.group) + gi];
  return p;
}

Int4Weights unpack_int4(const Int4Packed& p) {
  check_int4_shape(p.n, p.k, p.group);
  const size_t nk = size_t(p.n) * p.k, ng = size_t(p.n) * (p.k / p.group);
  FUTR_CHECK(p.weights.size() == nk / 2 && p.scales.size() == ng,
             "unpack_int4: {} bytes and {} scales given, {} and {} expected", p.weights.size(),
             p.scales.size(), nk / 2, ng);
  Int4Weights w{p.n, p.k, p.group, std::vector<int8_t>(nk), std::vector<uint16_t>(ng)};
  for (int r = 0; r < p.n; ++r)
    for (int c = 0; c < p.k; ++c) {
      const layout::Int4Pos pos = layout::int4_position(p.n, p.k, r, c);
      w.q[size_t(r) * p.k + c] = int8_t(((p.weights[pos.byte] >> pos.shift) & 0xf) - 8);
    }
  for (int r = 0; r < p.n; ++r)
    for (int gi = 0; gi < p.k / p.group; ++gi)
      w.scale[size_t(r) * (p.k / p.group) + gi] = p.scales[layout::int4_scale_index(p.k, p.group, r, gi)];
  return w;
}

std::vector<uint8_t> pack_e4m3(int n, int k, std::span<const uint8_t> rowmajor) {
  FUTR_CHECK(n > 0 && n % 16 == 0 && k > 0 && k % 64 == 0,
             "E4M3 packing: N = {}, K = {} unsupported (N % 16 == 0, K % 64 == 0)", n, k);
  FUTR_CHECK(rowmajor.size() == size_t(n) * k, "pack_e4m3: {} bytes given, {} expected", rowmajor.size(),
             size_t(n) * k);
  std::vector<uint8_t> out(rowmajor.size());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) out[layout::e4m3_position(n, k, r, c)] = rowmajor[size_t(r) * k + c];
  return out;
}

std::vector<uint8_t> unpack_e4m3(int n, int k, std::span<const uint8_t> packed) {
  FUTR_CHECK(n > 0 && n % 16 == 0 && k > 0 && k % 64 == 0,
             "E4M3 unpacking: N = {}, K = {} unsupported (N % 16 == 0, K % 64 == 0)", n, k);
  FUTR_CHECK(packed.size() == size_t(n) * k, "unpack_e4m3: {} bytes given, {} expected", packed.size(),
             size_t(n) * k);
  std::vector<uint8_t> out(packed.size());
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) out[size_t(r) * k + c] = packed[layout::e4m3_position(n, k, r, c)];
  return out;
}

Int4Weights int4_take_rows(const Int4Weights& w, std::span<const std::pair<int, int>> ranges) {
  Int4Weights out;
  out.k = w.k;
  out.group = w.group;
  const size_t gk = size_t(w.k / w.group);
  for (const auto& [b, e] : ranges) {
    FUTR_CHECK(0 <= b && b <= e && e <= w.n, "INT4 row slice [{}, {}) outside the {} rows", b, e, w.n);
    out.q.insert(out.q.end(), w.q.begin() + ptrdiff_t(size_t(b) * size_t(w.k)),
                 w.q.begin() + ptrdiff_t(size_t(e) * size_t(w.k)));
    out.scale.insert(out.scale.end(), w.scale.begin() + ptrdiff_t(size_t(b) * gk),
                     w.scale.begin() + ptrdiff_t(size_t(e) * gk));
    out.n += e - b;
  }
  return out;
}

Int4Weights int4_take_cols(const Int4Weights& w, int begin, int end) {
  FUTR_CHECK(0 <= begin && begin < end && end <= w.k, "INT4 column slice [{}, {}) outside the {} inputs",
             begin, end, w.k);
  FUTR_CHECK(
      begin % w.group == 0 && end % w.group == 0,
      "INT4 column slice [{}, {}) does not fall on group boundaries (group {}): a shard must hold whole "
      "scale groups",
      begin, end, w.group);
  Int4Weights out;
  out.n = w.n;
  out.k = end - begin;
  out.group = w.group;
  const int gk = w.k / w.group, g0 = begin / w.group, g1 = end / w.group;
  out.q.resize(size_t(out.n) * size_t(out.k));
  out.scale.resize(size_t(out.n) * size_t(g1 - g0));
  for (int r = 0; r < w.n; ++r) {
    std::copy_n(w.q.begin() + ptrdiff_t(size_t(r) * size_t(w.k) + size_t(begin)), out.k,
                out.q.begin() + ptrdiff_t(size_t(r) * size_t(out.k)));
    std::copy_n(w.scale.begin() + ptrdiff_t(size_t(r) * size_t(gk) + size_t(g0)), g1 - g0,
                out.scale.begin() + ptrdiff_t(size_t(r) * size_t(g1 - g0)));
  }
  return out;
}

}  // namespace futr::quant
