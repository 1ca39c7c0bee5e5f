// GPU tests of the decode step's small kernels against their CPU references
// (cpu_engine/ops.h): the residual + RMSNorm step (gather and add modes), RoPE, SwiGLU,
// the prefill path's row gather (a copy);
// the KV append with RoPE fused in against RoPE then append (bit-identical);
// and a chain of them launched as programmatic dependents (PDL) inside a CUDA
// graph against plain launches (bit-identical). Fresh random inputs every run;
// tolerances from tests/support/tolerances.h. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "cpu_engine/ops.h"
#include "kernels/layout/kv_cache.cuh"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/decode_attention.h"
#include "launch/decode_ops.h"
#include "launch/stream.h"
#include "model/rope.h"
#include "support/compare.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerances.h"

using namespace futr;

namespace {

using test::rng;

std::vector<float> randn(size_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng());
  return x;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = float_to_bf16(x[i]);
  return o;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = bf16_to_float(x[i]);
  return o;
}

// Residual add then RMSNorm (and the gather), for rows x H.
void check_rmsnorm(int rows, int H, bool gather) {
  const int vocab = 50;
  const auto embd = to_bf16(randn(size_t(vocab) * H, 1.0f));
  const auto x0 = randn(size_t(rows) * H, 2.0f);
  const auto add = to_bf16(randn(size_t(rows) * H, 1.0f));
  const auto gain = to_bf16(randn(size_t(H), 0.3f));
  std::vector<int> tok(static_cast<size_t>(rows));
  for (auto& t : tok) t = int(rng()() % vocab);
  // The reference: x = embd[token] or x0 + float(add); y = rmsnorm(x) * g.
  std::vector<float> x(size_t(rows) * H), g = from_bf16(gain), y(x.size());
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < H; ++j) {
      const size_t i = size_t(r) * H + j;
      x[i] = gather ? bf16_to_float(embd[size_t(tok[size_t(r)]) * H + j]) : x0[i] + bf16_to_float(add[i]);
    }
  cpu::rmsnorm(x.data(), g.data(), y.data(), rows, H, 1e-5f);

  cuda::DeviceBuffer<float> dx(x0);
  cuda::DeviceBuffer<uint16_t> dadd(add), dembd(embd), dgain(gain), dout(size_t(rows) * H);
  cuda::DeviceBuffer<int> dtok(tok);
  cuda::RmsNormArgs a;
  a.x = dx.get();
  a.add = gather ? nullptr : dadd.get();
  a.ld_add = H;
  a.tokens = gather ? dtok.get() : nullptr;
  a.embd = dembd.get();
  a.gain = dgain.get();
  a.out = dout.get();
  a.rows = rows;
  a.H = H;
  a.eps = 1e-5f;
  cuda::rmsnorm(a, nullptr);
  FUTR_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dx.download(), x) << "the FP32 residual (one rounded add per element) H " << H;
  const test::ErrorStats e = test::compare(from_bf16(dout.download()), y);
  EXPECT_EQ(e.non_finite, 0u);
  EXPECT_LT(e.rel_l2, test::tol::kBf16Output)
      << "rows " << rows << " H " << H << (gather ? " gather" : " add");
}

}  // namespace

TEST(DecodeOps, RmsNormMatchesTheCpu) {
  FUTR_REQUIRE_GPU();
  for (int H : {64, 576, 2048, 4096, 8192})
    for (int rows : {1, 7, 32}) {
      check_rmsnorm(rows, H, false);
      check_rmsnorm(rows, H, true);
    }
}

TEST(DecodeOps, RopeIsTheCpuRotationRoundedToBf16) {
  FUTR_REQUIRE_GPU();
  for (int D : {64, 128}) {
    const int rows = 9, heads = 5, ld = heads * D + 24, max_pos = 300;
    const RopeTable t = make_rope_table(D, 500000.0f, {}, max_pos);
    const auto x = to_bf16(randn(size_t(rows) * ld, 1.5f));
    std::vector<int> pos(static_cast<size_t>(rows));
    for (auto& p : pos) p = int(rng()() % max_pos);
    // Reference: each row at its own position, FP32, then BF16.
    std::vector<uint16_t> want = x;
    for (int r = 0; r < rows; ++r) {
      std::vector<float> row(static_cast<size_t>(ld));
      for (int j = 0; j < ld; ++j) row[size_t(j)] = bf16_to_float(x[size_t(r) * ld + j]);
      cpu::apply_rope(row.data(), 1, heads, ld, pos[size_t(r)], t);
      for (int j = 0; j < heads * D; ++j) want[size_t(r) * ld + j] = float_to_bf16(row[size_t(j)]);
    }
    cuda::DeviceBuffer<uint16_t> dx(x);
    cuda::DeviceBuffer<int> dpos(pos);
    cuda::DeviceBuffer<float> dc(t.cos), ds(t.sin);
    cuda::rope(dx.get(), ld, dpos.get(), dc.get(), ds.get(), rows, heads, D, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(dx.download(), want) << "D " << D << " (the columns past the heads untouched)";
  }
}

TEST(DecodeOps, SwigluMatchesTheCpu) {
  FUTR_REQUIRE_GPU();
  for (int I : {1536, 14336}) {
    const int rows = 5;
    const auto gu = to_bf16(randn(size_t(rows) * 2 * I, 2.0f));
    std::vector<float> g(size_t(rows) * I), u(g.size()), want(g.size());
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < I; ++j) {
        g[size_t(r) * I + j] = bf16_to_float(gu[size_t(r) * 2 * I + j]);
        u[size_t(r) * I + j] = bf16_to_float(gu[size_t(r) * 2 * I + I + j]);
      }
    cpu::swiglu(g.data(), u.data(), want.data(), int64_t(want.size()));
    cuda::DeviceBuffer<uint16_t> dgu(gu), dout(want.size());
    cuda::swiglu(dgu.get(), dout.get(), rows, I, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    const test::ErrorStats e = test::compare(from_bf16(dout.download()), want);
    EXPECT_EQ(e.non_finite, 0u);
    EXPECT_LT(e.rel_l2, test::tol::kBf16Output) << "I " << I;
  }
}

// The prefill embedding gather: each output row the table row its index names,
// bit for bit (a copy), for a vectorized width (% 8 == 0) and an odd one.
TEST(DecodeOps, GatherRowsCopiesTheIndexedRows) {
  FUTR_REQUIRE_GPU();
  for (int width : {576, 4096, 13}) {
    const int table_rows = 97, rows = 300;
    std::vector<uint16_t> table(size_t(table_rows) * width);
    for (auto& v : table) v = uint16_t(rng()());
    std::vector<int> index(static_cast<size_t>(rows));
    for (auto& i : index) i = int(rng()() % table_rows);
    std::vector<uint16_t> want(size_t(rows) * width);
    for (int r = 0; r < rows; ++r)
      std::memcpy(&want[size_t(r) * width], &table[size_t(index[size_t(r)]) * width], size_t(width) * 2);
    cuda::DeviceBuffer<uint16_t> dt(table), dout(want.size());
    cuda::DeviceBuffer<int> di(index);
    cuda::gather_rows(dt.get(), di.get(), dout.get(), rows, width, nullptr);
    FUTR_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(dout.download(), want) << "width " << width;
  }
}

namespace {

// One layer's cache on the device for the append tests (mirror on).
struct Cache {
  cuda::DeviceBuffer<uint16_t> k, v;
  cuda::DeviceBuffer<uint8_t> k4, v4;
  cuda::DeviceBuffer<float> ks, vs;
  int slots;
  Cache(int kvh, int D, int slots_) : slots(slots_) {
    k = cuda::DeviceBuffer<uint16_t>(size_t(slots) * kvh * D);
    v = cuda::DeviceBuffer<uint16_t>(size_t(slots) * kvh * D);
    k4 = cuda::DeviceBuffer<uint8_t>(layout::kv_nibble_bytes(kvh, D, slots));
    v4 = cuda::DeviceBuffer<uint8_t>(layout::kv_nibble_bytes(kvh, D, slots));
    ks = cuda::DeviceBuffer<float>(size_t(slots) * kvh);
    vs = cuda::DeviceBuffer<float>(size_t(slots) * kvh);
    for (auto* b : {&k, &v}) b->fill_bytes(0);
    for (auto* b : {&k4, &v4}) b->fill_bytes(0x88);
    for (auto* b : {&ks, &vs}) b->fill_bytes(0);
  }
  cuda::KvLayerPtrs ptrs() { return {k.get(), v.get(), k4.get(), v4.get(), ks.get(), vs.get(), slots}; }
};

}  // namespace

// RoPE fused into the append: the cache (BF16 + INT4 mirror, rotated or not)
// and the rotated queries equal cuda::rope over q and k followed by the plain
// append, bit for bit; launched with and without PDL.
TEST(DecodeOps, AppendWithRopeFusedEqualsRopeThenAppend) {
  FUTR_REQUIRE_GPU();
  for (int D : {64, 128})
    for (int kvh : {1, 3, 8})
      for (int rot : {0, 16}) {
        const int qh = kvh * 4, rows = 6, ld = (qh + 2 * kvh) * D, max_pos = 200;
        const RopeTable t = make_rope_table(D, 10000.0f, {}, max_pos);
        const auto x = to_bf16(randn(size_t(rows) * ld, 1.0f));
        std::vector<int> seq(static_cast<size_t>(rows)), pos(static_cast<size_t>(rows)), base = {0, 208, 416};
        // Rows r and r + 3 share sequence r % 3: distinct positions (two rows
        // writing one slot would race), r < 3 in [0, 100), the others in [100, 200).
        for (int r = 0; r < rows; ++r)
          seq[size_t(r)] = r % 3, pos[size_t(r)] = (r / 3) * 100 + int(rng()() % 100);
        cuda::DeviceBuffer<float> dc(t.cos), ds(t.sin);
        cuda::DeviceBuffer<int> dseq(seq), dpos(pos), dbase(base);
        auto run = [&](bool fused, bool pdl, std::vector<uint16_t>& q_out, Cache& c) {
          cuda::DeviceBuffer<uint16_t> dx(x);
          if (!fused) cuda::rope(dx.get(), ld, dpos.get(), dc.get(), ds.get(), rows, qh + kvh, D, nullptr);
          cuda::KvAppendArgs a;
          a.k = dx.get() + size_t(qh) * D;
          a.v = dx.get() + size_t(qh + kvh) * D;
          a.ld = ld;
          a.row_seq = dseq.get();
          a.row_pos = dpos.get();
          a.slot_base = dbase.get();
          a.cache = c.ptrs();
          a.rows = rows;
          a.kv_heads = kvh;
          a.head_dim = D;
          a.mirror = true;
          a.rot_block = rot;
          if (fused) {
            a.rope_cos = dc.get();
            a.rope_sin = ds.get();
            a.q = dx.get();
            a.q_heads = qh;
          }
          cuda::kv_append(a, nullptr, pdl);
          FUTR_CUDA_CHECK(cudaDeviceSynchronize());
          q_out = dx.download();
        };
        Cache want(kvh, D, 624), got(kvh, D, 624), got_pdl(kvh, D, 624);
        std::vector<uint16_t> q_want, q_got, q_pdl;
        run(false, false, q_want, want);
        run(true, false, q_got, got);
        run(true, true, q_pdl, got_pdl);
        const std::string what =
            "D " + std::to_string(D) + " kv heads " + std::to_string(kvh) + " rot " + std::to_string(rot);
        for (int r = 0; r < rows; ++r)  // the query heads (k in the row is rotated only by the unfused path)
          for (int j = 0; j < qh * D; ++j) {
            const size_t i = size_t(r) * ld + j;
            ASSERT_EQ(q_got[i], q_want[i]) << what << " q row " << r << " col " << j;
            ASSERT_EQ(q_pdl[i], q_want[i]) << what << " (pdl) q row " << r << " col " << j;
          }
        for (Cache* c : {&got, &got_pdl}) {
          EXPECT_EQ(c->k.download(), want.k.download()) << what;
          EXPECT_EQ(c->v.download(), want.v.download()) << what;
          EXPECT_EQ(c->k4.download(), want.k4.download()) << what;
          EXPECT_EQ(c->v4.download(), want.v4.download()) << what;
          const auto ks = c->ks.download(), kw = want.ks.download();
          EXPECT_EQ(0, std::memcmp(ks.data(), kw.data(), ks.size() * 4)) << what << " K scales";
        }
      }
}

// A chain rmsnorm -> rope -> swiglu -> rmsnorm captured in a CUDA graph with
// every launch a programmatic dependent equals the same launches without PDL.
TEST(DecodeOps, PdlChainInAGraphEqualsPlainLaunches) {
  FUTR_REQUIRE_GPU();
  const int rows = 4, H = 1024, I = 512, D = 64,
            heads = 8;  // a is [rows][2 I]; RoPE over its first 512 columns
  const RopeTable t = make_rope_table(D, 10000.0f, {}, 64);
  const auto x0 = randn(size_t(rows) * H, 1.0f);
  const auto y0 = to_bf16(randn(size_t(rows) * H, 1.0f));
  const auto gain = to_bf16(randn(size_t(H), 0.5f));
  std::vector<int> pos = {3, 17, 40, 63};
  cuda::DeviceBuffer<float> dc(t.cos), ds(t.sin);
  cuda::DeviceBuffer<int> dpos(pos);
  cuda::DeviceBuffer<uint16_t> dgain(gain);
  auto run = [&](bool pdl, bool graph) {
    cuda::DeviceBuffer<float> x(x0);
    cuda::DeviceBuffer<uint16_t> y(y0), a(size_t(rows) * H), s(size_t(rows) * I);
    cuda::Stream st;
    auto chain = [&](cudaStream_t stream) {
      cuda::RmsNormArgs n;
      n.x = x.get();
      n.add = y.get();
      n.ld_add = H;
      n.gain = dgain.get();
      n.out = a.get();
      n.rows = rows;
      n.H = H;
      cuda::rmsnorm(n, stream);
      cuda::rope(a.get(), H, dpos.get(), dc.get(), ds.get(), rows, heads, D, stream, pdl);
      cuda::swiglu(a.get(), s.get(), rows, I, stream, pdl);  // a as [rows][2 I]
      cuda::rmsnorm(n, stream, pdl);                         // x += y again, a rewritten after swiglu read it
    };
    if (graph) {
      cuda::Graph g = cuda::Graph::capture(st, chain);
      for (int i = 0; i < 3; ++i) g.launch(st);
    } else {
      for (int i = 0; i < 3; ++i) chain(st);
    }
    FUTR_CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<float> out = x.download();
    for (uint16_t v : a.download()) out.push_back(float(v));
    for (uint16_t v : s.download()) out.push_back(float(v));
    return out;
  };
  const auto plain = run(false, false);
  EXPECT_EQ(run(true, false), plain) << "eager, PDL";
  EXPECT_EQ(run(true, true), plain) << "graph, PDL";
  EXPECT_EQ(run(false, true), plain) << "graph, plain";
}
