// Tensor parallelism on the CPU (runtime/tensor_parallel.h): the
// Megatron split of a small random Llama (hidden 256, 16 query heads, 8 KV
// heads, head_dim 16, intermediate 512, vocab 1000, 2 layers) computed rank by
// rank with the CPU ops, partial sums added in rank order (the all-reduce),
// against the unsplit CPU forward pass (cpu::Forward), for TP 1 / 2 / 4 / 8:
// a prefill of several tokens, then decode steps over the per-rank KV caches
// (each rank caches only its own KV heads). The vocabulary-sharded LM head's
// shards concatenated are the logits; the argmax combined over the shards
// equals the argmax of the row. Plus the plan's ranges and its refusals.
//
// Fresh random weights and tokens every run (the seed is printed on failure).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "cpu_engine/forward.h"
#include "cpu_engine/kv_cache.h"
#include "cpu_engine/linear.h"
#include "cpu_engine/ops.h"
#include "cpu_engine/quant_linear.h"
#include "cpu_engine/tiny_model.h"
#include "model/synthetic.h"
#include "quant/int4_quant.h"
#include "runtime/sampler.h"
#include "runtime/tensor_parallel.h"
#include "support/compare.h"
#include "support/expect_error.h"
#include "support/tolerances.h"

namespace futr {
namespace {

using runtime::IndexRange;
using runtime::RankShard;
using runtime::TensorParallelPlan;

ModelConfig tp_config(bool tied) {
  ModelConfig c;
  c.name = "tp-test";
  c.hidden = 256;
  c.n_layers = 2;
  c.n_heads = 16;
  c.n_kv_heads = 8;
  c.head_dim = 16;
  c.intermediate = 512;
  c.vocab = 1000;
  c.max_context = 64;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = tied;
  return c;
}

// One rank's weights and KV cache: what a GPU of rank r would hold.
struct Rank {
  RankShard shard;
  struct Layer {
    Tensor wqkv;   // [(qh + 2 kvh) D, H]  rows q_rows | k_rows | v_rows of [Wq; Wk; Wv]
    Tensor wo;     // [H, qh D]            columns o_cols of Wo
    Tensor wgu;    // [2 f, H]             rows gate_rows | up_rows of [Wgate; Wup]
    Tensor wdown;  // [H, f]               columns down_cols of Wdown
  };
  std::vector<Layer> layers;           // [n_layers]
  Tensor wlm;                          // [vocab shard, H] rows of the LM head
  std::unique_ptr<cpu::KvStorage> kv;  // its own KV heads only
};

// The split model: every rank's shards sliced from the unsplit weights, run
// rank after rank on one thread; the sums over ranks are the all-reduces.
class SplitModel {
 public:
  SplitModel(const Model& m, const TensorParallelPlan& plan) : m_(m), plan_(plan) {
    const ModelConfig& c = m.config;
    rope_ = cpu::make_rope_table(c.head_dim, c.rope_theta, c.rope_scaling, c.max_context);
    ModelConfig local = c;  // the shape of one rank's KV cache
    local.n_heads = plan.q_heads_per_rank();
    local.n_kv_heads = plan.kv_heads_per_rank();
    for (const RankShard& s : plan.ranks) {
      Rank r;
      r.shard = s;
      for (const LayerWeights& L : m.weights.layers) {
        const Tensor qkv = runtime::stack_rows({&L.wq, &L.wk, &L.wv});
        const Tensor gu = runtime::stack_rows({&L.w_gate, &L.w_up});
        r.layers.push_back(
            {runtime::take_rows(qkv, {s.q_rows, s.k_rows, s.v_rows}), runtime::take_cols(L.wo, s.o_cols),
             runtime::take_rows(gu, {s.gate_rows, s.up_rows}), runtime::take_cols(L.w_down, s.down_cols)});
      }
      r.wlm = runtime::take_rows(m.weights.output(), {s.vocab});
      r.kv = std::make_unique<cpu::Fp32KvStorage>(local, c.max_context);
      ranks_.push_back(std::move(r));
    }
  }

  // Tokens at positions [pos, pos + n): logits [n, V] (the shards in rank
  // order) and, per row, the argmax combined from the ranks' shard maxima.
  Tensor eval(const std::vector<int32_t>& tokens, std::vector<int64_t>* combined_argmax) {
    const ModelConfig& c = m_.config;
    const int n = int(tokens.size()), H = c.hidden, D = c.head_dim;
    const int qh = plan_.q_heads_per_rank(), kvh = plan_.kv_heads_per_rank(), f = plan_.ffn_per_rank();
    const int W = plan_.qkv_rows_per_rank();
    std::vector<float> x(size_t(n) * H), xn(x.size()), sum(x.size()), part(x.size());
    std::vector<float> qkv(size_t(n) * W), k(size_t(n) * kvh * D), v(k.size()), attn(size_t(n) * qh * D);
    std::vector<float> gu(size_t(n) * 2 * f), s(size_t(n) * f);
    cpu::embed(m_.weights.tok_embd.ptr(), c.vocab, H, tokens, x.data());
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& L = m_.weights.layers[size_t(l)];
      // Attention: column-parallel QKV, local heads, row-parallel O.
      cpu::rmsnorm(x.data(), L.attn_norm.ptr(), xn.data(), n, H, c.rms_eps);
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (Rank& r : ranks_) {
        const Rank::Layer& RL = r.layers[size_t(l)];
        cpu::gemm_xwt(xn.data(), n, RL.wqkv.ptr(), W, H, qkv.data());
        cpu::apply_rope(qkv.data(), n, qh, W, pos_, rope_);
        cpu::apply_rope(qkv.data() + qh * D, n, kvh, W, pos_, rope_);
        for (int i = 0; i < n; ++i) {
          const float* row = qkv.data() + size_t(i) * W;
          std::copy_n(row + qh * D, kvh * D, k.data() + size_t(i) * kvh * D);
          std::copy_n(row + (qh + kvh) * D, kvh * D, v.data() + size_t(i) * kvh * D);
        }
        r.kv->write(l, pos_, n, k.data(), v.data());
        cpu::causal_attention(qkv.data(), W, n, pos_, qh, D, r.kv->read(l, pos_ + n), attn.data(), qh * D,
                              scratch_);
        cpu::gemm_xwt(attn.data(), n, RL.wo.ptr(), H, qh * D, part.data());
        cpu::add_inplace(sum.data(), part.data(), int64_t(sum.size()));  // all-reduce 1
      }
      cpu::add_inplace(x.data(), sum.data(), int64_t(x.size()));
      // Feed-forward: column-parallel gate/up pairs, local SwiGLU, row-parallel down.
      cpu::rmsnorm(x.data(), L.ffn_norm.ptr(), xn.data(), n, H, c.rms_eps);
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (Rank& r : ranks_) {
        const Rank::Layer& RL = r.layers[size_t(l)];
        cpu::gemm_xwt(xn.data(), n, RL.wgu.ptr(), 2 * f, H, gu.data());
        for (int i = 0; i < n; ++i) {
          const float* row = gu.data() + size_t(i) * 2 * f;  // [gate_r | up_r]
          cpu::swiglu(row, row + f, s.data() + size_t(i) * f, f);
        }
        cpu::gemm_xwt(s.data(), n, RL.wdown.ptr(), H, f, part.data());
        cpu::add_inplace(sum.data(), part.data(), int64_t(sum.size()));  // all-reduce 2
      }
      cpu::add_inplace(x.data(), sum.data(), int64_t(x.size()));
    }
    // LM head: vocabulary shards; concatenated (all-gather) and argmax-combined.
    cpu::rmsnorm(x.data(), m_.weights.out_norm.ptr(), xn.data(), n, H, c.rms_eps);
    Tensor logits({n, c.vocab});
    std::vector<std::vector<runtime::ShardMax>> maxima(static_cast<size_t>(n));
    for (Rank& r : ranks_) {
      const IndexRange vr = r.shard.vocab;
      std::vector<float> shard(size_t(n * vr.size()));
      cpu::gemm_xwt(xn.data(), n, r.wlm.ptr(), vr.size(), H, shard.data());
      for (int i = 0; i < n; ++i) {
        const std::span<const float> row(shard.data() + i * vr.size(), size_t(vr.size()));
        std::copy(row.begin(), row.end(), logits.row(i) + vr.begin);
        maxima[size_t(i)].push_back(runtime::shard_argmax(row, vr));
      }
    }
    combined_argmax->clear();
    for (const auto& mx : maxima) combined_argmax->push_back(runtime::combine_shard_argmax(mx).id);
    pos_ += n;
    return logits;
  }

 private:
  const Model& m_;
  TensorParallelPlan plan_;
  RopeTable rope_;
  std::vector<Rank> ranks_;
  cpu::AttentionScratch scratch_;
  int pos_ = 0;
};

// The gap between the largest and the second largest logit of a row.
float top2_gap(std::span<const float> row) {
  std::vector<float> v(row.begin(), row.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

void check_split_equals_unsplit(bool tied) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << (tied ? ", tied head" : ", untied head"));
  const ModelConfig c = tp_config(tied);
  const Model m = test::random_model(c, seed);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  std::uniform_int_distribution<int32_t> tok(0, c.vocab - 1);
  // A prefill of 7 tokens, then 3 decode steps over the cached positions.
  std::vector<std::vector<int32_t>> calls = {std::vector<int32_t>(7)};
  for (int32_t& t : calls[0]) t = tok(rng);
  for (int i = 0; i < 3; ++i) calls.push_back({tok(rng)});

  cpu::Forward ref(m, c.max_context);
  std::vector<Tensor> want;
  for (const auto& t : calls) want.push_back(ref.eval(t, 0));

  double worst = 0;
  for (int tp : {1, 2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "TP " << tp);
    const TensorParallelPlan plan = runtime::make_tensor_parallel_plan(c, tp);
    SplitModel split(m, plan);
    for (size_t call = 0; call < calls.size(); ++call) {
      std::vector<int64_t> argmax;
      const Tensor got = split.eval(calls[call], &argmax);
      ASSERT_EQ(got.shape, want[call].shape);
      const test::ErrorStats e = test::compare(got.data, want[call].data);
      EXPECT_EQ(e.non_finite, 0u);
      EXPECT_LE(e.rel_l2, test::tol::kTensorParallelSplit) << "call " << call << ", max abs " << e.max_abs;
      worst = std::max(worst, e.rel_l2);
      for (int i = 0; i < got.dim(0); ++i) {
        const std::span<const float> row(got.row(i), size_t(c.vocab));
        const std::span<const float> ref_row(want[call].row(i), size_t(c.vocab));
        // The combine over the shards is exactly the argmax of the gathered row...
        EXPECT_EQ(argmax[size_t(i)], runtime::argmax(row)) << "call " << call << " row " << i;
        // ...and the unsplit model's argmax unless its top two are within rounding.
        if (top2_gap(ref_row) > 1e-3f) {
          EXPECT_EQ(argmax[size_t(i)], runtime::argmax(ref_row)) << "call " << call << " row " << i;
        }
      }
    }
  }
  std::printf("[ info ] %s head: largest relative L2 of the split logits vs cpu::Forward: %.2e\n",
              tied ? "tied" : "untied", worst);
}

TEST(TensorParallel, SplitLayersAndHeadEqualUnsplitForward) { check_split_equals_unsplit(false); }
TEST(TensorParallel, SplitWithTiedHeadEqualsUnsplitForward) { check_split_equals_unsplit(true); }

// Every valid TP size of the test model and of Llama-3.1-70B: the ranges
// partition each dimension, are whole heads / pairs, and line up across the
// fused matrices (o_cols = q_rows, up = I + gate, down_cols = ffn).
TEST(TensorParallel, PlanRangesPartitionEveryDimension) {
  for (const ModelConfig& c : {tp_config(false), synthetic_config("llama-3.1-70b")}) {
    SCOPED_TRACE(c.name);
    const std::vector<int> sizes = runtime::valid_tp_sizes(c);
    EXPECT_EQ(sizes, (std::vector<int>{1, 2, 4, 8}));
    for (int tp : sizes) {
      SCOPED_TRACE(::testing::Message() << "TP " << tp);
      const TensorParallelPlan p = runtime::make_tensor_parallel_plan(c, tp);
      ASSERT_EQ(int(p.ranks.size()), tp);
      const int64_t D = c.head_dim, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
      EXPECT_EQ(p.q_heads_per_rank(), c.n_heads / tp);
      EXPECT_EQ(p.kv_heads_per_rank(), c.n_kv_heads / tp);
      EXPECT_EQ(p.qkv_rows_per_rank(), (c.n_heads + 2 * c.n_kv_heads) / tp * c.head_dim);
      int64_t vocab_next = 0;
      for (int r = 0; r < tp; ++r) {
        const RankShard& s = p.ranks[size_t(r)];
        EXPECT_EQ(s.rank, r);
        EXPECT_EQ(s.q_heads, (IndexRange{r * c.n_heads / tp, (r + 1) * c.n_heads / tp}));
        EXPECT_EQ(s.kv_heads, (IndexRange{r * c.n_kv_heads / tp, (r + 1) * c.n_kv_heads / tp}));
        // GQA groups stay on one rank: query head h reads KV head h / group.
        const int group = c.n_heads / c.n_kv_heads;
        EXPECT_EQ(s.q_heads.begin / group, s.kv_heads.begin);
        EXPECT_EQ(s.q_rows, (IndexRange{s.q_heads.begin * D, s.q_heads.end * D}));
        EXPECT_EQ(s.k_rows, (IndexRange{Q + s.kv_heads.begin * D, Q + s.kv_heads.end * D}));
        EXPECT_EQ(s.v_rows, (IndexRange{Q + KV + s.kv_heads.begin * D, Q + KV + s.kv_heads.end * D}));
        EXPECT_EQ(s.o_cols, s.q_rows);
        EXPECT_EQ(s.ffn, (IndexRange{r * I / tp, (r + 1) * I / tp}));
        EXPECT_EQ(s.gate_rows, s.ffn);
        EXPECT_EQ(s.up_rows, (IndexRange{I + s.ffn.begin, I + s.ffn.end}));
        EXPECT_EQ(s.down_cols, s.ffn);
        EXPECT_EQ(s.vocab.begin, vocab_next);
        EXPECT_LE(s.vocab.size(), p.max_vocab_shard());
        EXPECT_GE(s.vocab.size(), p.max_vocab_shard() - 1);
        vocab_next = s.vocab.end;
      }
      EXPECT_EQ(vocab_next, c.vocab);
    }
  }
  // A vocabulary that does not divide: balanced shards, the first ones larger.
  ModelConfig c = tp_config(false);
  c.vocab = 1003;
  const TensorParallelPlan p = runtime::make_tensor_parallel_plan(c, 4);
  EXPECT_EQ(p.ranks[0].vocab, (IndexRange{0, 251}));
  EXPECT_EQ(p.ranks[2].vocab, (IndexRange{502, 753}));
  EXPECT_EQ(p.ranks[3].vocab, (IndexRange{753, 1003}));
  EXPECT_EQ(p.max_vocab_shard(), 251);
}

TEST(TensorParallel, RefusesSplitsThatBreakHeadsOrPairs) {
  // SmolLM2-135M: 9 heads / 3 KV heads, intermediate 1536.
  const ModelConfig smol = synthetic_config("smollm2-135m");
  EXPECT_EQ(runtime::valid_tp_sizes(smol), (std::vector<int>{1, 3}));
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(smol, 2), "n_kv_heads 3 is not a multiple of TP 2");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(smol, 2), "n_heads 9 is not a multiple of TP 2");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(smol, 2),
                    "TP sizes that work for this model (n_heads 9, n_kv_heads 3, intermediate 1536): 1, 3");
  EXPECT_NO_THROW(runtime::make_tensor_parallel_plan(smol, 3));
  // 8 KV heads over 16 ranks: KV heads are divided, never replicated.
  const ModelConfig big = synthetic_config("llama-3.1-70b");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(big, 16),
                    "n_kv_heads 8 is not a multiple of TP 16 (each rank holds whole KV heads");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(big, 16),
                    "work for this model (n_heads 64, n_kv_heads 8, "
                    "intermediate 28672): 1, 2, 4, 8");
  // An intermediate width that breaks the SwiGLU pairs.
  ModelConfig c = tp_config(false);
  c.intermediate = 500;
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(c, 8), "intermediate 500 is not a multiple of TP 8");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(c, 8), "): 1, 2, 4");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(tp_config(false), 0), "TP 0 is out of range");
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(tp_config(false), -2), "TP -2 is out of range");
  c = tp_config(false);
  c.n_kv_heads = 5;
  EXPECT_FUTR_ERROR(runtime::make_tensor_parallel_plan(c, 1), "n_heads 16 is not a multiple of n_kv_heads 5");
}

TEST(TensorParallel, SlicingHelpers) {
  Tensor w({4, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data[size_t(i)] = float(i);  // w[r][c] = 3r + c
  const Tensor rows = runtime::take_rows(w, {{3, 4}, {0, 2}});
  EXPECT_EQ(rows.shape, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(rows.data, (std::vector<float>{9, 10, 11, 0, 1, 2, 3, 4, 5}));
  const Tensor cols = runtime::take_cols(w, {1, 3});
  EXPECT_EQ(cols.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(cols.data, (std::vector<float>{1, 2, 4, 5, 7, 8, 10, 11}));
  const Tensor stacked = runtime::stack_rows({&rows, &w});
  EXPECT_EQ(stacked.shape, (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(stacked.data[9], 0.0f);
  EXPECT_FUTR_ERROR(runtime::take_rows(w, {{2, 5}}), "rows [2, 5) outside [0, 4)");
  EXPECT_FUTR_ERROR(runtime::take_cols(w, {2, 4}), "columns [2, 4) outside [0, 3)");
  EXPECT_FUTR_ERROR(runtime::stack_rows({&w, &cols}), "does not stack with width 3");

  // The argmax combine: largest value, lowest global id among ties.
  const std::vector<float> a = {1, 5, 5}, b = {5, 2};
  const std::vector<runtime::ShardMax> m = {runtime::shard_argmax(b, {3, 5}),
                                            runtime::shard_argmax(a, {0, 3})};
  EXPECT_EQ(m[1].id, 1);
  EXPECT_EQ(runtime::combine_shard_argmax(m).id, 1);
  EXPECT_FUTR_ERROR(runtime::shard_argmax(a, {0, 2}), "3 logits for the vocabulary shard [0, 2)");
}

// A rank's INT4 shard (shard_quantized_weights) runs what the rank's part of
// the unsplit projection computes: the column-parallel projections' outputs
// are the matching slice of the full output (bit for bit: the same rows, the
// same per-group sums), the row-parallel ones' partial sums add up to the
// full output (FP32 rounding of the order). RTN weights, group 64.
TEST(TensorParallel, Int4ShardsComputeTheRanksPart) {
  ModelConfig c = tp_config(false);
  c.head_dim = 64;        // q_dim 1024, kv_dim 512: every rank's O columns are whole groups at TP 8
  c.intermediate = 1024;  // 128 units per rank at TP 8
  c.n_layers = 1;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.f, 1.f);
  const int H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, G = 64;
  quant::QuantizedWeights q;
  q.format = WeightFormat::kInt4;
  auto add = [&](Projection p, int n, int k) {
    std::vector<float> w(size_t(n) * size_t(k));
    for (float& v : w) v = nd(rng);
    quant::QuantizedTensor t;
    t.id = {0, p};
    t.format = WeightFormat::kInt4;
    t.n = n, t.k = k, t.method = "rtn";
    t.int4 = quant::quantize_int4(w, n, k, G, quant::ClipSearch{});
    q.tensors[t.id] = std::move(t);
  };
  add(Projection::kQ, Q, H), add(Projection::kK, KV, H), add(Projection::kV, KV, H),
      add(Projection::kO, H, Q);
  add(Projection::kGate, I, H), add(Projection::kUp, I, H), add(Projection::kDown, H, I);
  const int M = 3;
  auto run = [&](const quant::Int4Weights& w, const std::vector<float>& x) {
    std::vector<float> y(size_t(M) * size_t(w.n));
    cpu::Int4Linear(w, "w").forward_grouped(x.data(), M, y.data());
    return y;
  };
  auto random_x = [&](int k) {
    std::vector<float> x(size_t(M) * size_t(k));
    for (float& v : x) v = nd(rng);
    return x;
  };
  const std::vector<float> xh = random_x(H), xq = random_x(Q), xi = random_x(I);
  std::map<Projection, std::vector<float>> full;
  for (Projection p : kLayerProjections) {
    const Projection in = p;
    full[p] = run(q.at({0, p}).int4, in == Projection::kO ? xq : (in == Projection::kDown ? xi : xh));
  }
  for (int tp : {1, 2, 4, 8}) {
    const TensorParallelPlan plan = runtime::make_tensor_parallel_plan(c, tp);
    std::vector<float> o_sum(size_t(M) * size_t(H), 0.f), down_sum(o_sum.size(), 0.f);
    for (int r = 0; r < tp; ++r) {
      const RankShard& s = plan.ranks[size_t(r)];
      const quant::QuantizedWeights sh = runtime::shard_quantized_weights(q, plan, r);
      const ModelConfig rc = runtime::rank_config(c, plan);
      EXPECT_EQ(sh.at({0, Projection::kQ}).n, rc.q_dim());
      EXPECT_EQ(sh.at({0, Projection::kO}).k, rc.q_dim());
      EXPECT_EQ(sh.at({0, Projection::kDown}).k, rc.intermediate);
      // Column-parallel: the slice of the full output, bit for bit.
      auto expect_slice = [&](Projection p, IndexRange rows, int64_t base) {
        const std::vector<float> got = run(sh.at({0, p}).int4, xh);
        const std::vector<float>& f = full[p];
        const int n_full = q.at({0, p}).n;
        for (int m = 0; m < M; ++m)
          for (int64_t j = rows.begin; j < rows.end; ++j)
            ASSERT_EQ(got[size_t(m) * size_t(rows.size()) + size_t(j - rows.begin)],
                      f[size_t(m) * size_t(n_full) + size_t(j - base)])
                << "tp " << tp << " rank " << r << " proj " << int(p) << " row " << j;
      };
      expect_slice(Projection::kQ, s.q_rows, 0);
      expect_slice(Projection::kK, s.k_rows, Q);
      expect_slice(Projection::kV, s.v_rows, int64_t(Q) + KV);
      expect_slice(Projection::kGate, s.gate_rows, 0);
      expect_slice(Projection::kUp, s.up_rows, I);
      // Row-parallel: the rank's input columns -> a partial sum of the full output.
      auto cols_of = [&](const std::vector<float>& x, int k, IndexRange cols) {
        std::vector<float> out;
        for (int m = 0; m < M; ++m)
          out.insert(out.end(), x.begin() + ptrdiff_t(size_t(m) * size_t(k) + size_t(cols.begin)),
                     x.begin() + ptrdiff_t(size_t(m) * size_t(k) + size_t(cols.end)));
        return out;
      };
      const std::vector<float> po = run(sh.at({0, Projection::kO}).int4, cols_of(xq, Q, s.o_cols));
      const std::vector<float> pd = run(sh.at({0, Projection::kDown}).int4, cols_of(xi, I, s.down_cols));
      for (size_t i = 0; i < o_sum.size(); ++i) o_sum[i] += po[i], down_sum[i] += pd[i];
    }
    const auto eo = test::compare(o_sum, full[Projection::kO]),
               ed = test::compare(down_sum, full[Projection::kDown]);
    EXPECT_LT(eo.rel_l2, 1e-6) << "tp " << tp << ": O partial sums";
    EXPECT_LT(ed.rel_l2, 1e-6) << "tp " << tp << ": down partial sums";
  }
  // A column shard that would split a scale group is refused, naming the projection.
  ModelConfig narrow = c;
  narrow.intermediate = 512;  // 64 units per rank at TP 8: fine at group 64, not at 128
  quant::QuantizedWeights q128;
  q128.format = WeightFormat::kInt4;
  {
    std::vector<float> w(size_t(H) * 512);
    for (float& v : w) v = nd(rng);
    quant::QuantizedTensor t;
    t.id = {0, Projection::kDown};
    t.format = WeightFormat::kInt4;
    t.n = H, t.k = 512, t.method = "rtn";
    t.int4 = quant::quantize_int4(w, H, 512, 128, quant::ClipSearch{});
    q128.tensors[t.id] = std::move(t);
  }
  EXPECT_FUTR_ERROR(
      runtime::shard_quantized_weights(q128, runtime::make_tensor_parallel_plan(narrow, 8), 1),
      "blk.0.ffn_down [256 x 512]: INT4 column slice [64, 128) does not fall on group boundaries");
}

}  // namespace
}  // namespace futr
