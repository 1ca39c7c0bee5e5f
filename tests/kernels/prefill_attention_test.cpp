// Prefill attention (src/launch/prefill_attention.h: sm90_prefill_attention)
// against its CPU reference (src/reference/prefill_attention_ref.h) on fresh
// random data: packed requests of ragged lengths (1, 7, 64, 127, 128, 129,
// 1000, 4096 rows), with and without a prefix already in the cache (chunked
// prefill: pos0 = 0, 1, 100, 1000, 5000), head dims 64 / 128, SmolLM2 (9/3
// heads), Llama-3.1-8B (32/8), 70B (64/8), MHA (8/8) and a group of 3. Each
// request owns a run of slots; the slots past its last position hold NaN (the
// kernel's contract masks their scores and zeroes their V rows), and the
// cache's other slots random values; outputs are poisoned (0xff) before each
// launch, and rows of no request must stay poisoned. The persistent kernel
// runs with one CTA per SM and, in FewCtasManyItems, with 1-3 CTAs. A paged
// cache (block tables, blocks shuffled) gives the contiguous cache's bytes.
// Errors: relative L2 of the BF16 output (tests/support/tolerances.h);
// the largest per head dim is printed at the end.
//
// Host-only tests (run everywhere): the tile list, rejections.
// Run under compute-sanitizer with --gtest_filter='PrefillAttentionSmall.*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "core/numeric.h"
#include "kernels/layout/kv_cache.cuh"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/prefill_attention.h"
#include "reference/prefill_attention_ref.h"
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

struct Req {
  int pos0, n;  // prefix length, new rows
};

// Runs one packed batch and checks it against the reference.
void check_prefill(int kvh, int group, int d, const std::vector<Req>& reqs, int max_ctas = 0,
                   const std::vector<int>& paged_blocks = {}) {
  const int nh = kvh * group;
  // Slot runs: each request owns round_up(pos0 + n, 16) slots, plus 16 so the
  // NaN slots after it are inside its run; a spare run of 128 slots at the end
  // (random values) that the last block of the last request may read.
  std::vector<ref::PrefillRequestHost> hr;
  int slots = 0, rows = 0;
  for (const Req& r : reqs) {
    hr.push_back({rows, r.n, r.pos0, slots});
    rows += r.n;
    slots += (r.pos0 + r.n + 15) / 16 * 16 + 16;
  }
  slots += 128;
  ref::KvLayerHost cache(slots, kvh, d);
  cache.k = randn_bf16(cache.k.size(), 1.0f);
  cache.v = randn_bf16(cache.v.size(), 1.0f);
  for (const ref::PrefillRequestHost& r : hr)
    for (int t = r.pos0 + r.n_rows; t < r.pos0 + r.n_rows + 16; ++t)
      for (int h = 0; h < kvh; ++h)
        for (int e = 0; e < d; ++e) {
          cache.k[layout::kv_primary_index(kvh, d, r.slot_base + t, h, e)] = 0x7fc0;  // BF16 NaN
          cache.v[layout::kv_primary_index(kvh, d, r.slot_base + t, h, e)] = 0x7fc0;
        }
  // Queries ~ N(0, 2) (a peaked softmax), rows of a wider buffer (the QKV output's stride).
  const int64_t q_ld = int64_t(nh + 2 * kvh) * d, out_ld = int64_t(nh) * d + 8;
  const auto q = randn_bf16(size_t(rows) * size_t(q_ld), 2.0f);
  // Reference; rows of no request do not exist here (the packing is dense), but the
  // out buffer's row padding (out_ld > width) must stay poisoned.
  std::vector<float> want(size_t(rows) * size_t(out_ld), 0.0f);
  ref::prefill_attention(cache, q.data(), q_ld, group, hr, want.data(), out_ld);

  std::vector<cuda::PrefillRequest> cr;
  std::vector<int> row_begin, n_rows, pos0, slot_base;
  for (const auto& r : hr) {
    cr.push_back({r.row_begin, r.n_rows, r.pos0, r.slot_base});
    row_begin.push_back(r.row_begin);
    n_rows.push_back(r.n_rows);
    pos0.push_back(r.pos0);
    slot_base.push_back(r.slot_base);
  }
  const std::vector<int> tiles = cuda::prefill_tiles(cr);
  cuda::DeviceBuffer<uint16_t> dq(q), dk(cache.k), dv(cache.v), dout(size_t(rows) * size_t(out_ld));
  cuda::DeviceBuffer<int> drb(row_begin), dn(n_rows), dp(pos0), ds(slot_base), dt(tiles);
  cuda::PrefillAttentionArgs a;
  a.q = dq.get();
  a.out = dout.get();
  a.q_ld = q_ld;
  a.out_ld = out_ld;
  a.rows = rows;
  a.n_heads = nh;
  a.kv_heads = kvh;
  a.head_dim = d;
  a.k = dk.get();
  a.v = dv.get();
  a.num_slots = slots;
  a.row_begin = drb.get();
  a.n_rows = dn.get();
  a.pos0 = dp.get();
  a.slot_base = ds.get();
  a.tiles = dt.get();
  a.n_tiles = int(tiles.size() / 2);
  a.max_ctas = max_ctas;
  dout.fill_bytes(0xff);
  cuda::prefill_attention(a, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  const auto o16 = dout.download();
  // A second launch gives the same bytes (no race, no read of uninitialized memory).
  dout.fill_bytes(0xff);
  cuda::prefill_attention(a, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dout.download(), o16) << "a second launch differs";
  // The same through block tables (docs/LAYOUTS.md, "Paged KV cache"): each
  // request's positions moved block by block to shuffled blocks of another
  // cache (the rest NaN), -1 past a request's blocks (read as zeros): the
  // same bytes.
  for (const int block : paged_blocks) {
    int shift = 0;
    while ((1 << shift) < block) ++shift;
    int stride = 0, total = 0;
    std::vector<int> nb;
    for (const auto& r : hr) {
      nb.push_back((r.pos0 + r.n_rows + block - 1) / block);
      stride = std::max(stride, nb.back());
      total += nb.back();
    }
    const int n_blocks = total + 2;
    ref::KvLayerHost pc(n_blocks * block, kvh, d);
    std::fill(pc.k.begin(), pc.k.end(), uint16_t(0x7fc0));
    std::fill(pc.v.begin(), pc.v.end(), uint16_t(0x7fc0));
    std::vector<int> order(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) order[size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), rng());
    std::vector<int> tables(hr.size() * size_t(stride), -1);
    const size_t row = size_t(kvh) * size_t(d);
    int next = 0;
    for (size_t q = 0; q < hr.size(); ++q)
      for (int i = 0; i < nb[q]; ++i) {
        const int blk = order[size_t(next++)];
        tables[q * size_t(stride) + size_t(i)] = blk;
        const int n = std::min(block, hr[q].pos0 + hr[q].n_rows - i * block);
        const size_t src = size_t(hr[q].slot_base + i * block) * row, dst = size_t(blk) * size_t(block) * row;
        std::copy_n(cache.k.begin() + ptrdiff_t(src), size_t(n) * row, pc.k.begin() + ptrdiff_t(dst));
        std::copy_n(cache.v.begin() + ptrdiff_t(src), size_t(n) * row, pc.v.begin() + ptrdiff_t(dst));
      }
    cuda::DeviceBuffer<uint16_t> pk(pc.k), pv(pc.v);
    cuda::DeviceBuffer<int> dtab(tables);
    cuda::PrefillAttentionArgs pa = a;
    pa.k = pk.get();
    pa.v = pv.get();
    pa.num_slots = pc.num_slots;
    pa.slot_base = nullptr;
    pa.blocks = {dtab.get(), stride, shift};
    dout.fill_bytes(0xff);
    cuda::prefill_attention(pa, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(dout.download(), o16) << "blocks of " << block << " differ from the contiguous cache";
  }

  std::vector<float> got, ref;
  for (int r = 0; r < rows; ++r) {
    for (int e = 0; e < nh * d; ++e) {
      got.push_back(bf16_to_float(o16[size_t(r) * out_ld + e]));
      ref.push_back(want[size_t(r) * out_ld + e]);
    }
    for (int e = nh * d; e < out_ld; ++e)
      ASSERT_EQ(o16[size_t(r) * out_ld + e], 0xffff) << "row " << r << " padding column " << e << " written";
  }
  const test::ErrorStats e = test::compare(got, ref);
  const std::string what = "d" + std::to_string(d);
  worst()[what] = std::max(worst()[what], e.rel_l2);
  std::string shape = "heads " + std::to_string(nh) + "/" + std::to_string(kvh) + " requests";
  for (const Req& r : reqs) shape += " (" + std::to_string(r.pos0) + "+" + std::to_string(r.n) + ")";
  EXPECT_EQ(e.non_finite, 0u) << shape;
  EXPECT_LT(e.rel_l2, test::tol::kPrefillAttention) << shape;
  // Per request too: a wrong short request would hide in a long one's norm.
  for (const auto& r : hr) {
    const size_t b = size_t(r.row_begin) * nh * d, n = size_t(r.n_rows) * nh * d;
    const test::ErrorStats er =
        test::compare(std::span<const float>(got).subspan(b, n), std::span<const float>(ref).subspan(b, n));
    EXPECT_LT(er.rel_l2, test::tol::kPrefillAttention) << shape << ": request at row " << r.row_begin;
  }
}

TEST(PrefillAttentionHost, TilesCoverEveryRowHeaviestFirst) {
  const std::vector<cuda::PrefillRequest> reqs = {{0, 300, 0, 0}, {300, 1, 5000, 512}, {301, 129, 10, 6000}};
  const std::vector<int> t = cuda::prefill_tiles(reqs);
  ASSERT_EQ(t.size() % 2, 0u);
  std::vector<int> covered(430, 0);
  int64_t prev = INT64_MAX;
  for (size_t i = 0; i < t.size(); i += 2) {
    const auto& r = reqs[size_t(t[i])];
    const int row0 = t[i + 1], last = std::min(row0 + 128, r.n_rows) - 1;
    for (int k = row0; k <= last; ++k) ++covered[size_t(r.row_begin + k)];
    const int64_t keys = int64_t(r.pos0) + last + 1;
    EXPECT_LE(keys, prev) << "tile " << i / 2 << " is heavier than the one before";
    prev = keys;
  }
  for (int c : covered) EXPECT_EQ(c, 1);
  EXPECT_EQ(t[0], 1);  // the one-row request with a 5000-token prefix reads the most keys
}

TEST(PrefillAttentionHost, RefusesWhatIsNotCompiled) {
  cuda::PrefillAttentionArgs a;
  a.head_dim = 96;
  a.n_heads = 8;
  a.kv_heads = 8;
  EXPECT_FUTR_ERROR(cuda::prefill_attention(a, nullptr), "head_dim 96 is not compiled");
  a.head_dim = 128;
  a.n_heads = 12;
  a.kv_heads = 8;
  EXPECT_FUTR_ERROR(cuda::prefill_attention(a, nullptr), "not a multiple of 8 KV heads");
  EXPECT_EQ(cuda::prefill_attention_variants().size(), 2u);
  EXPECT_FUTR_ERROR(cuda::prefill_tiles({{0, 0, 0, 0}}), "request 0 has 0 rows");
}

// Small shapes: the compute-sanitizer set.
TEST(PrefillAttentionSmall, OneRequest) {
  FUTR_REQUIRE_GPU();
  check_prefill(3, 3, 64, {{0, 7}});
  check_prefill(2, 4, 128, {{0, 130}});
}

TEST(PrefillAttentionSmall, PackedWithPrefixes) {
  FUTR_REQUIRE_GPU();
  check_prefill(3, 3, 64, {{0, 1}, {100, 64}, {1, 129}});
  check_prefill(2, 4, 128, {{37, 5}, {0, 128}, {200, 1}});
}

// A paged cache (blocks of 16, 64 and 128 slots) gives the contiguous cache's bytes.
TEST(PrefillAttentionSmall, PagedEqualsContiguousBitwise) {
  FUTR_REQUIRE_GPU();
  check_prefill(3, 3, 64, {{0, 1}, {100, 64}, {1, 129}}, 0, {16, 64, 128});
  check_prefill(2, 4, 128, {{37, 5}, {0, 300}, {200, 1}}, 3, {16, 128});
}

// Few persistent CTAs: each runs many items back to back (the Q buffers and
// the K/V ring carried from one item to the next, the V tail zeroed in a
// stage a later item reuses).
TEST(PrefillAttentionSmall, FewCtasManyItems) {
  FUTR_REQUIRE_GPU();
  check_prefill(3, 3, 64, {{0, 1}, {100, 64}, {1, 129}, {0, 300}}, 2);
  check_prefill(2, 4, 128, {{37, 5}, {0, 257}, {200, 1}}, 3);
  check_prefill(2, 2, 128, {{0, 7}}, 1);
}

TEST(PrefillAttention, SmolLM2Shapes) {
  FUTR_REQUIRE_GPU();
  check_prefill(3, 3, 64, {{0, 1000}});
  check_prefill(3, 3, 64, {{0, 127}, {0, 128}, {0, 129}, {1000, 300}, {5000, 33}});
}

TEST(PrefillAttention, Llama8BShapes) {
  FUTR_REQUIRE_GPU();
  check_prefill(8, 4, 128, {{0, 77}, {513, 200}, {64, 1}, {0, 1024}, {1000, 300}});
  check_prefill(2, 2, 128, {{0, 4096}});  // a long one on 4 heads (the float64 reference's cost)
}

TEST(PrefillAttention, Llama70BAndOtherGroups) {
  FUTR_REQUIRE_GPU();
  check_prefill(8, 8, 128, {{0, 512}, {300, 100}});
  check_prefill(8, 1, 128, {{0, 300}, {7, 64}});  // MHA
  check_prefill(8, 1, 64, {{0, 300}, {7, 64}});
  check_prefill(4, 3, 128, {{0, 257}, {129, 129}});
}

TEST(PrefillAttention, PrintLargestErrors) {
  for (const auto& [k, v] : worst()) std::printf("largest relative L2 %s: %.3e\n", k.c_str(), v);
}

}  // namespace
