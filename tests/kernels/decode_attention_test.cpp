// Decode-step KV-cache kernels (src/launch/decode_attention.h: sm90_kv_append,
// sm90_kv_append_rows, sm90_decode_attention, sm90_decode_attention_combine)
// against their CPU reference (src/reference/decode_attention_ref.h) on fresh
// random data:
//
//   - both append kernels' BF16 primary, INT4 nibbles and scales byte-identical
//     to the CPU quantizer's (rotated and not, head_dim 64/128, ragged rows);
//     the prefill append (rows) equal to the decode append byte for byte with
//     RoPE fused, q rotated in place, prefixes and a non-finite row;
//   - a paged cache (block tables of 16, 32 and 64 slots, blocks shuffled
//     over a larger cache): attention and both appends byte-identical to the
//     contiguous cache;
//   - attention over the BF16 cache, the INT4 mirror and the rotated mirror:
//     contexts 1, 7, 64, 1000, 8192, 32768 + 13, ragged batches, SmolLM2
//     (9/3 heads, D 64), Llama-3.1-8B (32/8, D 128) and 70B (64/8) shapes,
//     MHA (8/8); the split count of the heuristic, 1 (no merge) and many
//     (the last CTA merges; the counters come back zero and a second launch
//     gives the same bytes). Slots past each sequence's length hold NaN (the contract masks
//     them); outputs are poisoned (0xff) before each launch.
// Errors: relative L2 of the BF16 output, bound in tests/support/tolerances.h;
// the largest per variant is printed at the end.
//
// Host-only tests (run everywhere): rejection of shapes that are not compiled.
// Run under compute-sanitizer with --gtest_filter='DecodeAttentionSmall.*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "core/numeric.h"
#include "kernels/layout/kv_cache.cuh"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_attention.h"
#include "launch/device.h"
#include "reference/decode_attention_ref.h"
#include "support/compare.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerances.h"

using namespace futr;

namespace {

using test::randn_bf16;
using test::rng;

std::map<std::string, double>& worst() {
  static std::map<std::string, double> w;
  return w;
}

int round16(int n) { return (n + 15) / 16 * 16; }

// The device copy of a host cache layer.
struct DeviceLayer {
  cuda::DeviceBuffer<uint16_t> k, v;
  cuda::DeviceBuffer<uint8_t> k4, v4;
  cuda::DeviceBuffer<float> ks, vs;
  int num_slots = 0;
  explicit DeviceLayer(const ref::KvLayerHost& h)
      : k(h.k), v(h.v), k4(h.k4), v4(h.v4), ks(h.ks), vs(h.vs), num_slots(h.num_slots) {}
  cuda::KvLayerPtrs ptrs() const {
    cuda::KvLayerPtrs p;
    p.k = k.get();
    p.v = v.get();
    p.k4 = k4.get();
    p.v4 = v4.get();
    p.ks = ks.get();
    p.vs = vs.get();
    p.num_slots = num_slots;
    return p;
  }
};

// A batch of sequences in one cache layer: each owns round16(len) slots, slots
// from len on hold NaN (BF16 primary and mirror scales), K/V rows ~ N(0, 1).
struct Batch {
  int kv_heads, group, head_dim;
  std::vector<int> lens, base;
  ref::KvLayerHost cache;
  std::vector<uint16_t> q;
  Batch(int kvh, int g, int d, std::vector<int> lens_, bool mirror, int rot_block)
      : kv_heads(kvh), group(g), head_dim(d), lens(std::move(lens_)), cache(total(lens), kvh, d) {
    int b0 = 0;
    for (int len : lens) {
      base.push_back(b0);
      b0 += round16(len);
    }
    const int64_t ld = int64_t(kvh) * d;
    for (size_t s = 0; s < lens.size(); ++s) {
      const int n = lens[s];
      const auto k = randn_bf16(size_t(n) * size_t(ld), 1.0f), v = randn_bf16(size_t(n) * size_t(ld), 1.0f);
      std::vector<int> seq(static_cast<size_t>(n), int(s)), pos(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) pos[size_t(i)] = i;
      ref::kv_append(cache, k.data(), v.data(), ld, n, seq.data(), pos.data(), base.data(), mirror,
                     rot_block);
      for (int t = n; t < round16(n); ++t)
        for (int h = 0; h < kvh; ++h) {
          const int slot = base[s] + t;
          cache.ks[layout::kv_scale_index(cache.num_slots, slot, h)] = NAN;
          cache.vs[layout::kv_scale_index(cache.num_slots, slot, h)] = NAN;
          for (int e = 0; e < d; ++e) {
            cache.k[layout::kv_primary_index(kvh, d, slot, h, e)] = 0x7fc0;  // BF16 NaN
            cache.v[layout::kv_primary_index(kvh, d, slot, h, e)] = 0x7fc0;
          }
        }
    }
    // Queries ~ N(0, 2): peaked enough that the softmax is not flat.
    q = randn_bf16(lens.size() * size_t(kvh * g) * size_t(d), 2.0f);
  }
  static int total(const std::vector<int>& lens) {
    int n = 0;
    for (int len : lens) n += round16(len);
    return std::max(n, 16);
  }
};

// The cache kinds every attention check runs: the BF16 cache, the INT4 mirror, the rotated mirror.
struct CacheKind {
  const char* name;
  bool int4;
  int rot;
};
std::array<CacheKind, 3> cache_kinds(int d) {
  return {{{"bf16", false, 0}, {"int4", true, 0}, {"int4-rot", true, std::min(64, d)}}};
}

// Runs every cache kind over `b` with the given split override (0: heuristic);
// returns nothing, asserts the error bound.
void check_attention(int kvh, int group, int d, const std::vector<int>& lens, int splits = 0) {
  int max_len = 1;
  for (int len : lens) max_len = std::max(max_len, len);
  const std::array<CacheKind, 3> kinds = cache_kinds(d);
  for (const CacheKind& kind : kinds) {
    Batch b(kvh, group, d, lens, kind.int4, kind.rot);
    DeviceLayer dev(b.cache);
    const int batch = int(lens.size()), nh = kvh * group;
    std::vector<float> ref(size_t(batch) * nh * d);
    ref::decode_attention(b.cache, b.q.data(), batch, group, b.base.data(), b.lens.data(), kind.int4,
                          kind.rot, ref.data());
    cuda::AttentionShape s{batch, kvh, group, d, kind.int4, kind.rot, max_len};
    cuda::AttentionConfig cfg =
        cuda::attention_heuristic(s, cuda::require_device().sm_count);  // its occupancy
    if (splits > 0) cfg.splits = splits;
    cuda::DeviceBuffer<uint16_t> q(b.q), out(ref.size());
    cuda::DeviceBuffer<int> base(b.base), len(b.lens);
    cuda::DeviceBuffer<float> ws(std::max<size_t>(1, cuda::attention_workspace_floats(s, cfg)));
    cuda::DeviceBuffer<int> counters(cuda::attention_counters(s));
    counters.fill_bytes(0);
    out.fill_bytes(0xff);
    cuda::AttentionArgs a{q.get(),  out.get(), base.get(),     len.get(),      dev.ptrs(),
                          ws.get(), ws.size(), counters.get(), counters.size()};
    cuda::decode_attention(s, a, cfg, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    // Counters left zero, and a second launch (a graph replay's view) gives the same bytes.
    for (int v : counters.download()) ASSERT_EQ(v, 0);
    const auto first16 = out.download();
    out.fill_bytes(0xff);
    cuda::decode_attention(s, a, cfg, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(out.download(), first16) << "a second launch differs";
    const auto o16 = out.download();
    std::vector<float> o(o16.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = bf16_to_float(o16[i]);
    const test::ErrorStats e = test::compare(o, ref);
    const std::string what = std::string(kind.name) + " d" + std::to_string(d);
    worst()[what] = std::max(worst()[what], e.rel_l2);
    EXPECT_EQ(e.non_finite, 0u) << what << " " << cuda::describe(cfg);
    EXPECT_LT(e.rel_l2, test::tol::kDecodeAttention)
        << what << " heads " << nh << "/" << kvh << " batch " << batch << " max_len " << max_len << " "
        << cuda::describe(cfg);
  }
}

// The append arguments of K/V rows (row map and cache on the device).
cuda::KvAppendArgs append_args(const uint16_t* k, const uint16_t* v, int64_t ld,
                               const cuda::DeviceBuffer<int>& seq, const cuda::DeviceBuffer<int>& pos,
                               const cuda::DeviceBuffer<int>& base, const DeviceLayer& dev, int rows, int kvh,
                               int d, bool mirror, int rot_block, int* nonfinite) {
  cuda::KvAppendArgs a;
  a.k = k;
  a.v = v;
  a.ld = ld;
  a.row_seq = seq.get();
  a.row_pos = pos.get();
  a.slot_base = base.get();
  a.cache = dev.ptrs();
  a.rows = rows;
  a.kv_heads = kvh;
  a.head_dim = d;
  a.mirror = mirror;
  a.rot_block = rot_block;
  a.nonfinite = nonfinite;
  return a;
}

// The decode append (one CTA per row) or the prefill one (rows per CTA), then a sync.
void run_append(const cuda::KvAppendArgs& a, bool rows_kernel) {
  if (rows_kernel) cuda::kv_append_rows(a, nullptr);
  else cuda::kv_append(a, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
}

void check_append(int kvh, int d, int rot_block, bool rows_kernel = false) {
  const std::vector<int> lens = {5, 16, 33};
  Batch b(kvh, 1, d, lens, true, rot_block);  // a filled cache to append into
  ref::KvLayerHost want = b.cache;
  DeviceLayer dev(b.cache);
  // New rows: one per sequence at its next position, plus a second one for sequence 1 (ragged).
  const std::vector<int> seq = {0, 1, 1, 2}, pos = {5, 16, 17, 33};
  std::vector<int> base = b.base;
  base[1] = b.base[1];
  const int rows = int(seq.size());
  // The pool must hold the new positions: sequence 2 ends at slot base + 48 > 33.
  ASSERT_LE(base[2] + 34, b.cache.num_slots + 16);
  const int64_t ld = int64_t(2) * kvh * d + 64;  // rows of a wider buffer (k and v interleaved)
  const auto kvrows = randn_bf16(size_t(rows) * size_t(ld), 3.0f);
  // Sequence 2's slots stop at its length rounded to 16 (48): position 33 is inside.
  ref::kv_append(want, kvrows.data(), kvrows.data() + kvh * d, ld, rows, seq.data(), pos.data(), base.data(),
                 true, rot_block);
  cuda::DeviceBuffer<uint16_t> src(kvrows);
  cuda::DeviceBuffer<int> dseq(seq), dpos(pos), dbase(base), nonfinite(std::vector<int>{0});
  cuda::KvAppendArgs a = append_args(src.get(), src.get() + kvh * d, ld, dseq, dpos, dbase, dev, rows, kvh, d,
                                     true, rot_block, nonfinite.get());
  run_append(a, rows_kernel);
  EXPECT_EQ(dev.k.download(), want.k);
  EXPECT_EQ(dev.v.download(), want.v);
  EXPECT_EQ(dev.k4.download(), want.k4) << "K nibbles d" << d << " rot " << rot_block;
  EXPECT_EQ(dev.v4.download(), want.v4) << "V nibbles d" << d << " rot " << rot_block;
  const auto ks = dev.ks.download(), vs = dev.vs.download();
  // Scales: bitwise (NaN placeholders compare equal bitwise).
  EXPECT_EQ(0, std::memcmp(ks.data(), want.ks.data(), ks.size() * 4)) << "K scales";
  EXPECT_EQ(0, std::memcmp(vs.data(), want.vs.data(), vs.size() * 4)) << "V scales";
  EXPECT_EQ(nonfinite.download()[0], 0);
}

// The prefill append (kv_append_rows) against the decode append (kv_append),
// both with RoPE fused and q heads rotated in place: a chunk of `rows` rows
// spread over three sequences with prefixes (positions continue each one), one
// row's K holding a NaN. Every byte of the cache (primary, nibbles, scales),
// the rotated q and the non-finite count must be equal. Then the q/k/v biases
// fused in, against the same kernel on rows biased on the host.
void check_append_rows_vs_decode(int nh, int kvh, int d, bool mirror, int rot_block, int rows) {
  const std::vector<int> prefix = {0, 37, 300};
  std::vector<int> seq, pos, base;
  int slots = 0;
  std::vector<int> take = {rows / 2, rows / 3, rows - rows / 2 - rows / 3};
  for (size_t s = 0; s < prefix.size(); ++s) {
    base.push_back(slots);
    for (int i = 0; i < take[s]; ++i) {
      seq.push_back(int(s));
      pos.push_back(prefix[s] + i);
    }
    slots += round16(prefix[s] + take[s]);
  }
  const int max_pos = 300 + rows + 1;
  std::uniform_real_distribution<float> ang(-1.f, 1.f);
  std::vector<float> cos_t(size_t(max_pos) * size_t(d / 2)), sin_t(cos_t.size());
  for (size_t i = 0; i < cos_t.size(); ++i) {
    cos_t[i] = ang(rng());
    sin_t[i] = ang(rng());
  }
  const int64_t ld = int64_t(nh + 2 * kvh) * d;  // the QKV GEMM's output rows
  const auto finite_qkv = randn_bf16(size_t(rows) * size_t(ld), 2.0f);
  auto qkv = finite_qkv;
  qkv[size_t(rows / 2) * size_t(ld) + size_t(nh) * d + 5] = 0x7fc0;  // a NaN in one row's first K head
  ref::KvLayerHost init(slots, kvh, d);
  const auto fill = randn_bf16(init.k.size(), 1.0f);
  init.k = fill;
  init.v = fill;
  cuda::DeviceBuffer<float> dcos(cos_t), dsin(sin_t);
  cuda::DeviceBuffer<int> dseq(seq), dpos(pos), dbase(base);
  struct Out {
    std::vector<uint16_t> k, v, q;
    std::vector<uint8_t> k4, v4;
    std::vector<float> ks, vs;
    int nonfinite = 0;
  };
  auto run = [&](bool rows_kernel, const std::vector<uint16_t>& rows_in = {}, const float* bias = nullptr) {
    DeviceLayer dev(init);
    cuda::DeviceBuffer<uint16_t> src(rows_in.empty() ? qkv : rows_in);
    cuda::DeviceBuffer<int> nonfinite(std::vector<int>{0});
    cuda::KvAppendArgs a = append_args(src.get() + nh * d, src.get() + (nh + kvh) * d, ld, dseq, dpos, dbase,
                                       dev, rows, kvh, d, mirror, rot_block, nonfinite.get());
    a.q = src.get();
    a.rope_cos = dcos.get();
    a.rope_sin = dsin.get();
    a.q_heads = nh;
    a.bias = bias;
    run_append(a, rows_kernel);
    return Out{dev.k.download(),  dev.v.download(),  src.download(),    dev.k4.download(),
               dev.v4.download(), dev.ks.download(), dev.vs.download(), nonfinite.download()[0]};
  };
  const Out want = run(false), got = run(true);
  const std::string what =
      "heads " + std::to_string(nh) + "/" + std::to_string(kvh) + " d" + std::to_string(d) +
      (mirror ? " mirror rot " + std::to_string(rot_block) : " bf16") + " rows " + std::to_string(rows);
  EXPECT_EQ(got.k, want.k) << what;
  EXPECT_EQ(got.v, want.v) << what;
  EXPECT_EQ(got.q, want.q) << what << ": q (and the K/V source) after RoPE";
  EXPECT_EQ(got.k4, want.k4) << what;
  EXPECT_EQ(got.v4, want.v4) << what;
  EXPECT_EQ(0, std::memcmp(got.ks.data(), want.ks.data(), want.ks.size() * 4)) << what << ": K scales";
  EXPECT_EQ(0, std::memcmp(got.vs.data(), want.vs.data(), want.vs.size() * 4)) << what << ": V scales";
  EXPECT_EQ(want.nonfinite, 1) << what;
  EXPECT_EQ(got.nonfinite, want.nonfinite) << what;

  // The q/k/v biases (qwen2): each kernel with the biases fused in writes what
  // it writes for rows the host biased first (bf16(x + b) per value, then RoPE).
  std::vector<float> b(static_cast<size_t>(ld));
  for (float& x : b) x = 2.0f * ang(rng());
  std::vector<uint16_t> biased(finite_qkv.size());
  for (size_t i = 0; i < biased.size(); ++i)
    biased[i] = float_to_bf16(bf16_to_float(finite_qkv[i]) + b[i % size_t(ld)]);
  cuda::DeviceBuffer<float> dbias(b);
  for (const bool rows_kernel : {false, true}) {
    const Out plain = run(rows_kernel, biased), fused = run(rows_kernel, finite_qkv, dbias.get());
    const std::string bw = what + (rows_kernel ? " rows kernel" : " decode kernel") + ", biases";
    EXPECT_EQ(fused.k, plain.k) << bw;
    EXPECT_EQ(fused.v, plain.v) << bw;
    // q in place (the K/V columns of the source stay as given: biased on the host in one run only).
    auto q_cols = [&](const std::vector<uint16_t>& all) {
      std::vector<uint16_t> q;
      for (int r = 0; r < rows; ++r)
        q.insert(q.end(), all.begin() + ptrdiff_t(size_t(r) * size_t(ld)),
                 all.begin() + ptrdiff_t(size_t(r) * size_t(ld) + size_t(nh) * size_t(d)));
      return q;
    };
    EXPECT_EQ(q_cols(fused.q), q_cols(plain.q)) << bw << ": q after the bias and RoPE";
    EXPECT_EQ(fused.k4, plain.k4) << bw;
    EXPECT_EQ(fused.v4, plain.v4) << bw;
    EXPECT_EQ(0, std::memcmp(fused.ks.data(), plain.ks.data(), plain.ks.size() * 4)) << bw << ": K scales";
    EXPECT_EQ(0, std::memcmp(fused.vs.data(), plain.vs.data(), plain.vs.size() * 4)) << bw << ": V scales";
    EXPECT_EQ(fused.nonfinite, 0) << bw;
  }
}

// A paged copy of a contiguous cache (docs/LAYOUTS.md, "Paged KV cache"):
// sequence s's positions [0, blocks_of(s) * B) moved block by block to
// shuffled blocks of a larger cache (spare blocks hold NaN), the tables
// [sequences][stride] naming them, -1 past each sequence's blocks.
struct Paged {
  ref::KvLayerHost cache;
  std::vector<int> tables;
  int stride = 0, shift = 0;
  std::vector<int> blocks_of;  // per sequence
  // Copies slots [src, src + n) of `from` to [dst, dst + n) of `to` (every array; n a multiple of 8).
  static void copy_slots(const ref::KvLayerHost& from, int src, ref::KvLayerHost& to, int dst, int n) {
    const size_t row = size_t(from.kv_heads) * size_t(from.head_dim);
    std::copy_n(from.k.begin() + ptrdiff_t(size_t(src) * row), size_t(n) * row,
                to.k.begin() + ptrdiff_t(size_t(dst) * row));
    std::copy_n(from.v.begin() + ptrdiff_t(size_t(src) * row), size_t(n) * row,
                to.v.begin() + ptrdiff_t(size_t(dst) * row));
    if (from.k4.empty()) return;
    const size_t half = row / 2;  // nibble bytes per slot (K in 8-slot tiles: the same bytes per slot)
    std::copy_n(from.k4.begin() + ptrdiff_t(size_t(src) * half), size_t(n) * half,
                to.k4.begin() + ptrdiff_t(size_t(dst) * half));
    std::copy_n(from.v4.begin() + ptrdiff_t(size_t(src) * half), size_t(n) * half,
                to.v4.begin() + ptrdiff_t(size_t(dst) * half));
    for (int h = 0; h < from.kv_heads; ++h)
      for (int i = 0; i < n; ++i) {
        to.ks[layout::kv_scale_index(to.num_slots, dst + i, h)] =
            from.ks[layout::kv_scale_index(from.num_slots, src + i, h)];
        to.vs[layout::kv_scale_index(to.num_slots, dst + i, h)] =
            from.vs[layout::kv_scale_index(from.num_slots, src + i, h)];
      }
  }
  Paged(const ref::KvLayerHost& c, const std::vector<int>& base, const std::vector<int>& lens, int block,
        int spare)
      : cache(0, 0, 0) {
    shift = 0;
    while ((1 << shift) < block) ++shift;
    int total = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      blocks_of.push_back(std::max(1, (round16(lens[s]) + block - 1) / block));
      stride = std::max(stride, blocks_of.back());
      total += blocks_of.back();
    }
    const int n_blocks = total + spare;
    cache = ref::KvLayerHost(n_blocks * block, c.kv_heads, c.head_dim);
    std::fill(cache.k.begin(), cache.k.end(), uint16_t(0x7fc0));
    std::fill(cache.v.begin(), cache.v.end(), uint16_t(0x7fc0));
    std::fill(cache.ks.begin(), cache.ks.end(), NAN);
    std::fill(cache.vs.begin(), cache.vs.end(), NAN);
    std::vector<int> order(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) order[size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), rng());
    tables.assign(lens.size() * size_t(stride), -1);
    int next = 0;
    for (size_t s = 0; s < lens.size(); ++s)
      for (int i = 0; i < blocks_of[s]; ++i) {
        const int blk = order[size_t(next++)];
        tables[s * size_t(stride) + size_t(i)] = blk;
        // The contiguous cache holds round16(len) slots of s: copy what exists of this block.
        const int n = std::min(block, round16(lens[s]) - i * block);
        if (n > 0) copy_slots(c, base[s] + i * block, cache, blk * block, n);
      }
  }
  // The contiguous layout back (slots [base[s], base[s] + round16(len)) of a cache shaped like `like`).
  ref::KvLayerHost unpage(const ref::KvLayerHost& like, const std::vector<int>& base,
                          const std::vector<int>& lens, int block) const {
    ref::KvLayerHost out = like;
    for (size_t s = 0; s < lens.size(); ++s)
      for (int i = 0; i < blocks_of[s]; ++i) {
        const int n = std::min(block, round16(lens[s]) - i * block);
        if (n > 0)
          copy_slots(cache, tables[s * size_t(stride) + size_t(i)] * block, out, base[s] + i * block, n);
      }
    return out;
  }
};

// The attention through block tables (blocks of 16 and 64 slots, shuffled
// over a larger cache whose spare blocks hold NaN) gives the bytes of the
// contiguous cache, for every cache kind and a split count that merges.
void check_paged_attention(int kvh, int group, int d, const std::vector<int>& lens) {
  int max_len = 1;
  for (int len : lens) max_len = std::max(max_len, len);
  const std::array<CacheKind, 3> kinds = cache_kinds(d);
  for (const CacheKind& kind : kinds) {
    Batch b(kvh, group, d, lens, kind.int4, kind.rot);
    const int batch = int(lens.size());
    cuda::AttentionShape s{batch, kvh, group, d, kind.int4, kind.rot, max_len};
    for (const int splits : {0, 5}) {
      cuda::AttentionConfig cfg = cuda::attention_heuristic(s, cuda::require_device().sm_count);
      if (splits > 0) cfg.splits = splits;
      cuda::DeviceBuffer<uint16_t> q(b.q), out(size_t(batch) * kvh * group * d);
      cuda::DeviceBuffer<int> base(b.base), len(b.lens);
      cuda::DeviceBuffer<float> ws(std::max<size_t>(1, cuda::attention_workspace_floats(s, cfg)));
      cuda::DeviceBuffer<int> counters(cuda::attention_counters(s));
      counters.fill_bytes(0);
      auto run = [&](const DeviceLayer& dev, const int* slot_base, const layout::KvBlockTable& t) {
        out.fill_bytes(0xff);
        cuda::AttentionArgs a{q.get(),  out.get(), slot_base,      len.get(),      dev.ptrs(),
                              ws.get(), ws.size(), counters.get(), counters.size()};
        a.blocks = t;
        cuda::decode_attention(s, a, cfg, nullptr);
        FUTR_CUDA_CHECK(cudaDeviceSynchronize());
        return out.download();
      };
      const auto want = run(DeviceLayer(b.cache), base.get(), {});
      for (const int block : {16, 64}) {
        const Paged pg(b.cache, b.base, lens, block, 3);
        cuda::DeviceBuffer<int> tables(pg.tables);
        const auto got = run(DeviceLayer(pg.cache), nullptr, {tables.get(), pg.stride, pg.shift});
        EXPECT_EQ(got, want) << kind.name << " d" << d << " blocks of " << block << " splits " << cfg.splits;
      }
    }
  }
}

// Both append kernels through block tables write every byte where the
// contiguous append writes it (the paged cache mapped back is equal).
void check_paged_append(int kvh, int d, int rot_block, bool rows_kernel) {
  // New rows inside each sequence's slots (rounded to 16): the paged copy
  // and the contiguous cache then hold the same positions.
  const std::vector<int> lens = {5, 10, 33};
  Batch b(kvh, 1, d, lens, true, rot_block);
  const std::vector<int> seq = {0, 1, 1, 2}, pos = {5, 10, 11, 33};
  const std::vector<int> grown = {6, 12, 34};  // the lengths after the rows (sequence 1 takes two)
  const int rows = int(seq.size());
  const int64_t ld = int64_t(2) * kvh * d + 64;
  const auto kvrows = randn_bf16(size_t(rows) * size_t(ld), 3.0f);
  cuda::DeviceBuffer<uint16_t> src(kvrows);
  cuda::DeviceBuffer<int> dseq(seq), dpos(pos), dbase(b.base), nonfinite(std::vector<int>{0});
  DeviceLayer contiguous(b.cache);
  run_append(append_args(src.get(), src.get() + kvh * d, ld, dseq, dpos, dbase, contiguous, rows, kvh, d,
                         true, rot_block, nonfinite.get()),
             rows_kernel);
  for (const int block : {16, 32}) {
    const Paged pg(b.cache, b.base, grown, block, 2);
    DeviceLayer dev(pg.cache);
    cuda::DeviceBuffer<int> tables(pg.tables);
    cuda::KvAppendArgs a = append_args(src.get(), src.get() + kvh * d, ld, dseq, dpos, dbase, dev, rows, kvh,
                                       d, true, rot_block, nonfinite.get());
    a.slot_base = nullptr;
    a.blocks = {tables.get(), pg.stride, pg.shift};
    run_append(a, rows_kernel);
    Paged after = pg;
    after.cache.k = dev.k.download();
    after.cache.v = dev.v.download();
    after.cache.k4 = dev.k4.download();
    after.cache.v4 = dev.v4.download();
    after.cache.ks = dev.ks.download();
    after.cache.vs = dev.vs.download();
    const ref::KvLayerHost got = after.unpage(b.cache, b.base, grown, block);
    const std::string what = std::string(rows_kernel ? "rows" : "decode") + " append d" + std::to_string(d) +
                             " blocks of " + std::to_string(block);
    EXPECT_EQ(got.k, contiguous.k.download()) << what;
    EXPECT_EQ(got.v, contiguous.v.download()) << what;
    EXPECT_EQ(got.k4, contiguous.k4.download()) << what;
    EXPECT_EQ(got.v4, contiguous.v4.download()) << what;
    const auto ks = contiguous.ks.download(), vs = contiguous.vs.download();
    EXPECT_EQ(0, std::memcmp(got.ks.data(), ks.data(), ks.size() * 4)) << what << ": K scales";
    EXPECT_EQ(0, std::memcmp(got.vs.data(), vs.data(), vs.size() * 4)) << what << ": V scales";
  }
}

class Report : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [k, v] : worst())
      std::printf("decode attention: largest relative error %s: %.3e\n", k.c_str(), v);
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new Report);

}  // namespace

// ---- host-only: what is not compiled is refused, naming the nearest ---------------
TEST(DecodeAttentionHost, RejectsWhatIsNotCompiled) {
  cuda::AttentionShape s{1, 8, 4, 96, true, 0, 128};
  EXPECT_FUTR_ERROR(cuda::attention_heuristic(s, 132, 4), "head_dim 96 is not compiled");
  s.head_dim = 128;
  s.group = 16;
  EXPECT_FUTR_ERROR(cuda::attention_heuristic(s, 132, 4), "16 query heads per KV head");
  s.group = 4;
  s.rot_block = 48;
  EXPECT_FUTR_ERROR(cuda::attention_heuristic(s, 132, 4), "power of two");
  s.rot_block = 64;
  s.int4 = false;
  EXPECT_FUTR_ERROR(cuda::attention_heuristic(s, 132, 4), "INT4 mirror only");
  EXPECT_EQ(cuda::attention_variants().size(), 6u);
}

TEST(DecodeAttentionHost, HeuristicFillsWholeWavesWithLongEnoughChunks) {
  // 5 CTAs resident per SM x 132 SMs = 660 per wave.
  cuda::AttentionShape s{1, 8, 4, 128, true, 64, 8192};
  const cuda::AttentionConfig c = cuda::attention_heuristic(s, 132, 5);
  EXPECT_EQ(c.splits, 32);  // as many as 256-token chunks allow: 256 CTAs, one partial wave
  s.max_len = 1024;         // 4 splits leave 100 of 132 SMs idle: one CTA per SM, >= 64 keys each
  EXPECT_EQ(cuda::attention_heuristic(s, 132, 5).splits, 16);
  s.kv_heads = 3;
  s.group = 3;
  s.head_dim = 64;
  EXPECT_EQ(cuda::attention_heuristic(s, 132, 5).splits, 16) << "1024 keys in chunks of 64";
  s = {1, 8, 4, 128, true, 64, 8192};
  s.batch = 32;
  s.max_len = 32768;  // 256 (sequence, head) pairs: 3 splits = 768 CTAs = 1.16 waves, 5 = 1280 = 1.94
  const int sp = cuda::attention_heuristic(s, 132, 5).splits;
  const double waves = 256.0 * sp / 660.0;
  EXPECT_GT(waves - std::floor(waves), 0.85) << sp << " splits leave a small last wave";
  s.max_len = 100;
  EXPECT_EQ(cuda::attention_heuristic(s, 132, 5).splits, 1);
  EXPECT_EQ(cuda::attention_workspace_floats(s, {1}), 0u);
}

TEST(DecodeAttentionHost, CtasPerSequenceFollowTheBatch) {
  // 4 CTAs resident per SM x 132 SMs = 528 per wave; 8 KV heads; the
  // measured choices (docs/PERF.md, decode attention at the 8B shape).
  cuda::AttentionShape s{1, 8, 4, 128, false, 0, 1024};
  const std::array<int, 6> buckets{1, 2, 4, 8, 16, 32};
  const int splits = cuda::attention_heuristic_invariant(s, 132, buckets, 4).splits;
  EXPECT_EQ(splits, 8);
  EXPECT_EQ(cuda::attention_ctas(s, splits, 132, 4).ctas, 8) << "64 CTAs: one per chunk";
  s.batch = 8;  // 64 pairs x 8 chunks: one wave
  EXPECT_EQ(cuda::attention_ctas(s, splits, 132, 4).ctas, 8);
  s.batch = 16;  // 128 pairs: 4 CTAs each (one wave of 512), two chunks per CTA
  EXPECT_EQ(cuda::attention_ctas(s, splits, 132, 4).ctas, 4);
  s.batch = 32;  // 256 pairs: 2 CTAs each
  const cuda::AttentionConfig c = cuda::attention_ctas(s, splits, 132, 4);
  EXPECT_EQ(c.splits, 8);
  EXPECT_EQ(c.ctas, 2);
  EXPECT_EQ(cuda::describe(c), "splits=8 ctas=2");
  EXPECT_EQ(cuda::describe(cuda::AttentionConfig{8, 3}), "splits=8 ctas=3");
  EXPECT_EQ(cuda::describe(cuda::AttentionConfig{8, 5}), "splits=8 ctas=4")
      << "5 CTAs of 2 chunks: 4 launched";
  EXPECT_FUTR_ERROR(cuda::attention_ctas(s, 0, 132, 4), "splits 0 out of range");
}

// ---- small (also the compute-sanitizer set) ----------------------------------------
// A CTA reducing several chunks in turn writes the same bits as one CTA per
// chunk (the output depends on the split count only).
TEST(DecodeAttentionSmall, ChunksPerCtaGiveTheSameBits) {
  FUTR_REQUIRE_GPU();
  const int kvh = 2, group = 4, d = 128;
  const std::vector<int> lens{0, 5, 100, 333, 700};
  struct Kind {
    bool int4;
    int rot;
  };
  for (const Kind kind : {Kind{false, 0}, Kind{true, 0}, Kind{true, 64}}) {
    Batch b(kvh, group, d, lens, kind.int4, kind.rot);
    DeviceLayer dev(b.cache);
    cuda::AttentionShape s{int(lens.size()), kvh, group, d, kind.int4, kind.rot, 700};
    cuda::DeviceBuffer<uint16_t> q(b.q), out(size_t(s.batch) * kvh * group * d);
    cuda::DeviceBuffer<int> base(b.base), len(b.lens);
    cuda::DeviceBuffer<int> counters(cuda::attention_counters(s));
    counters.fill_bytes(0);
    for (int splits : {5, 8}) {
      const cuda::AttentionConfig one{splits, 0};
      cuda::DeviceBuffer<float> ws(cuda::attention_workspace_floats(s, one));
      cuda::AttentionArgs a{q.get(),  out.get(), base.get(),     len.get(),      dev.ptrs(),
                            ws.get(), ws.size(), counters.get(), counters.size()};
      out.fill_bytes(0xff);
      cuda::decode_attention(s, a, one, nullptr);
      FUTR_CUDA_CHECK(cudaDeviceSynchronize());
      const auto want = out.download();
      for (int ctas = 1; ctas <= splits; ++ctas) {
        const cuda::AttentionConfig c{splits, ctas};
        out.fill_bytes(0xff);
        cuda::decode_attention(s, a, c, nullptr);
        FUTR_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(out.download(), want)
            << (kind.int4 ? "int4" : "bf16") << " rot " << kind.rot << " " << cuda::describe(c);
        for (int v : counters.download()) ASSERT_EQ(v, 0) << cuda::describe(c);
      }
    }
  }
}

// ---- small (also the compute-sanitizer set) ----------------------------------------
TEST(DecodeAttentionSmall, AppendIsByteIdenticalToTheCpuQuantizer) {
  FUTR_REQUIRE_GPU();
  for (int d : {64, 128}) {
    check_append(3, d, 0);
    check_append(3, d, 64);
    check_append(8, d, 16);
  }
}

TEST(DecodeAttentionSmall, AppendRowsIsByteIdenticalToTheCpuQuantizer) {
  FUTR_REQUIRE_GPU();
  for (int d : {64, 128}) {
    check_append(3, d, 0, true);
    check_append(3, d, 64, true);
    check_append(8, d, 16, true);
  }
}

TEST(DecodeAttentionSmall, AppendRowsWithRopeEqualsTheDecodeAppendWithAndWithoutBiases) {
  FUTR_REQUIRE_GPU();
  // SmolLM2 (9/3, D 64) and Llama-3.1-8B (32/8, D 128); 16 KV heads: fewer rows per CTA with the mirror.
  for (bool mirror : {false, true}) {
    check_append_rows_vs_decode(9, 3, 64, mirror, 0, 61);
    check_append_rows_vs_decode(32, 8, 128, mirror, 0, 203);
    check_append_rows_vs_decode(16, 16, 128, mirror, 0, 9);
  }
  check_append_rows_vs_decode(9, 3, 64, true, 64, 61);
  check_append_rows_vs_decode(32, 8, 128, true, 32, 203);
}

TEST(DecodeAttentionSmall, PagedEqualsContiguousBitwise) {
  FUTR_REQUIRE_GPU();
  check_paged_attention(3, 3, 64, {1, 7, 64, 100, 300});
  check_paged_attention(8, 4, 128, {13, 260});
}

TEST(DecodeAttentionSmall, PagedAppendWritesWhereTheContiguousAppendWrites) {
  FUTR_REQUIRE_GPU();
  for (const bool rows_kernel : {false, true}) {
    check_paged_append(3, 64, 64, rows_kernel);
    check_paged_append(2, 128, 0, rows_kernel);
  }
}

TEST(DecodeAttentionSmall, ShortRaggedContexts) {
  FUTR_REQUIRE_GPU();
  check_attention(3, 3, 64, {1, 7, 64, 100});    // SmolLM2
  check_attention(8, 4, 128, {1, 7, 64, 33});    // Llama-3.1-8B
  check_attention(8, 4, 128, {7, 64, 300}, 1);   // no merge
  check_attention(8, 4, 128, {7, 64, 300}, 40);  // many (partly empty) chunks
}

// ---- the matrix of the issue ----------------------------------------------------------
TEST(DecodeAttention, LongContexts) {
  FUTR_REQUIRE_GPU();
  check_attention(8, 4, 128, {1000});
  check_attention(8, 4, 128, {8192});
  check_attention(8, 4, 128, {32768 + 13});
  check_attention(3, 3, 64, {8192, 5, 1000});
}

TEST(DecodeAttention, GqaRatiosAndShapes) {
  FUTR_REQUIRE_GPU();
  check_attention(8, 8, 128, {1, 1000, 2049});  // 70B: 64/8
  check_attention(8, 1, 128, {64, 777});        // MHA 8/8
  check_attention(4, 1, 64, {300, 31});         // MHA, D 64
  check_attention(2, 8, 64, {513});             // group 8, D 64
}

TEST(DecodeAttention, ManySequences) {
  FUTR_REQUIRE_GPU();
  std::uniform_int_distribution<int> u(1, 600);
  std::vector<int> lens(64);
  for (int& l : lens) l = u(rng());
  check_attention(3, 3, 64, lens);
  lens.resize(40);
  check_attention(8, 4, 128, lens);
}
