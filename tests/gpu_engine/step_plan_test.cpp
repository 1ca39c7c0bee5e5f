// The decode step plan (src/gpu_engine/step_plan.h), built without a GPU for
// SmolLM2-135M's and Llama-3.1-8B's shapes in every bucket:
//
//   - the op list: count per layer (6 in the fused buckets: 1 row, and 2..8
//     rows where the rows' x slices fit the gemv, always at SmolLM2's shapes;
//     8 at one row without the fused norm, 9 above), order, the layers they
//     belong to, the buffers they read and write (the fused norm's residual
//     alternating between x and x2), the LM head over kDecodeMaxRows rows in
//     every bucket;
//   - the configurations the batch-invariant heuristics choose: every W4A16
//     GEMM's is cuda::linear_config(M = bucket, N, K, group) (in the fused
//     buckets the gemv for QKV, gate/up and down with the same K split), its K split
//     cuda::decode_splits(N, K) in every bucket; the attention's split count
//     cuda::attention_heuristic_invariant's, the same in every bucket;
//   - PDL on every op but the first and the LM head; the breakdown's rows;
//   - with the streaming LM head (BF16 or INT4): the head over the bucket's
//     rows, PDL on, every other op as with cuBLASLt;
//   - tensor parallelism all-reduces the O and down outputs only; without GPU
//     sampling there is no sample op; describe() has a line per op;
//   - every op reads only what an earlier op wrote (StepAccess), the attention
//     of a layer after that layer's append;
//   - a bucket that is not one of 1, 2, 4, 8, 16, 32 is refused.
// Needs no GPU (label cpu): the plan is a pure function of the shapes, the
// SM count and the attention's resident CTAs per SM (given here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "gpu_engine/step_plan.h"
#include "launch/decode_attention.h"
#include "launch/linear.h"
#include "launch/w4a16.h"
#include "model/synthetic.h"
#include "support/expect_error.h"

namespace futr::gpu {
namespace {

constexpr int kSms = 132;     // the H200's
constexpr int kResident = 2;  // attention CTAs per SM (the test's choice: the device is not asked)

StepPlanConfig config_for(const std::string& model, KvFormat kv = KvFormat::kInt4Rot, int ctx = 1024) {
  StepPlanConfig c;
  c.model = synthetic_config(model);
  c.lm_rows = c.model.vocab;
  c.sampleable_vocab = c.model.vocab;
  c.kv = kv;
  c.kv_block = 64;
  c.ctx = ctx;
  c.sm_count = kSms;
  c.attention_resident_per_sm = kResident;
  c.gemms = StepPlanConfig::default_gemms(c.model);
  return c;
}

// Whether bucket b fuses the norms: one row, or up to 8 rows whose x slices fit
// the gemv's shared memory (kGemvRowsSmem) in every QKV and gate/up GEMM.
bool fuses(const StepPlanConfig& c, int b) {
  if (b == 1) return true;
  if (b > std::min(c.fuse_norm_rows, cuda::kDecodeGemvMaxRows)) return false;
  for (const auto& layer : c.gemms)
    for (int p : {0, 2}) {
      const StepPlanConfig::Gemm& g = layer[size_t(p)];
      const cuda::DecodeConfig h =
          cuda::linear_config(cuda::DecodeWeights::kInt4, b, g.n, g.k, kSms, g.group);
      if (cuda::decode_gemv_smem(cuda::decode_as_gemv(h), b, g.k, g.group) > kGemvRowsSmem) return false;
    }
  return true;
}

bool same(const cuda::DecodeConfig& a, const cuda::DecodeConfig& b) {
  return a.kernel == b.kernel && a.tn == b.tn && a.loads == b.loads && a.batches == b.batches &&
         a.mt == b.mt && a.splits == b.splits && a.seq == b.seq && a.ctas == b.ctas && a.run == b.run &&
         a.probe == b.probe && a.pdl == b.pdl;
}

// The ops of layer l, kinds in order.
std::vector<StepOpKind> layer_kinds(const StepPlan& p, int l) {
  std::vector<StepOpKind> k;
  for (const StepOp& op : p.ops)
    if (op.layer == l) k.push_back(op.kind);
  return k;
}

using K = StepOpKind;

TEST(StepPlan, OpsPerLayerAndOrderInEveryBucket) {
  for (const std::string model : {"smollm2-135m", "llama-3.1-8b"}) {
    const StepPlanConfig c = config_for(model);
    const int L = c.model.n_layers;
    for (int b : kDecodeBuckets) {
      SCOPED_TRACE(model + " bucket " + std::to_string(b));
      const StepPlan p = build_step_plan(c, b);
      EXPECT_EQ(p.bucket, b);
      if (model == "smollm2-135m") {
        EXPECT_EQ(fuses(c, b), b <= 8);
      }
      if (fuses(c, b)) {
        // The fused norm and the SwiGLU staged by the down gemv: 6 per layer,
        // the last layer's final norm, embedding, head, reduce, sample.
        EXPECT_TRUE(p.fused_norm);
        EXPECT_TRUE(p.swiglu_in_down);
        ASSERT_EQ(p.ops.size(), size_t(6 * L + 5));
        for (int l = 0; l < L; ++l) {
          std::vector<K> want = {K::kGemm, K::kRopeAppend, K::kAttention, K::kGemm, K::kGemm, K::kGemm};
          if (l + 1 == L) want.push_back(K::kNorm);
          EXPECT_EQ(layer_kinds(p, l), want) << "layer " << l;
        }
      } else {
        EXPECT_FALSE(p.fused_norm);
        EXPECT_FALSE(p.swiglu_in_down);
        ASSERT_EQ(p.ops.size(), size_t(9 * L + 4));
        for (int l = 0; l < L; ++l)
          EXPECT_EQ(layer_kinds(p, l), (std::vector<K>{K::kGemm, K::kRopeAppend, K::kAttention, K::kGemm,
                                                       K::kNorm, K::kGemm, K::kSwiglu, K::kGemm, K::kNorm}))
              << "layer " << l;
      }
      EXPECT_EQ(p.ops.front().kind, K::kEmbedNorm);
      EXPECT_EQ(p.ops[p.ops.size() - 3].kind, K::kLmHead);
      EXPECT_EQ(p.ops[p.ops.size() - 2].kind, K::kLogitsReduce);
      EXPECT_EQ(p.ops.back().kind, K::kSample);
      // Layers in order, every op's rows the bucket but the head's.
      int last_layer = -1;
      for (const StepOp& op : p.ops) {
        if (op.layer >= 0) {
          EXPECT_GE(op.layer, last_layer);
          last_layer = op.layer;
        }
        EXPECT_EQ(op.rows, op.kind == K::kLmHead ? kDecodeMaxRows : b) << StepPlan::describe(op);
        EXPECT_GE(op.breakdown, 0);
        EXPECT_LT(op.breakdown, kBreakdownRows);
        EXPECT_EQ(op.pdl, op.kind != K::kEmbedNorm && op.kind != K::kLmHead) << StepPlan::describe(op);
      }
    }
  }
}

TEST(StepPlan, StreamingLmHeadRunsTheBucketsRows) {
  for (const std::string model : {"smollm2-135m", "llama-3.1-8b"}) {
    StepPlanConfig c = config_for(model);
    for (int b : kDecodeBuckets) {
      SCOPED_TRACE(model + " bucket " + std::to_string(b));
      const StepPlan lt = build_step_plan(c, b);
      c.lm_head_streaming = true;
      const StepPlan ours = build_step_plan(c, b);
      c.lm_head_streaming = false;
      ASSERT_EQ(ours.ops.size(), lt.ops.size());
      for (size_t i = 0; i < ours.ops.size(); ++i) {
        const StepOp &o = ours.ops[i], &l = lt.ops[i];
        EXPECT_EQ(o.kind, l.kind);
        if (o.kind == K::kLmHead) {
          EXPECT_TRUE(o.lm_streaming);
          EXPECT_FALSE(l.lm_streaming);
          EXPECT_EQ(o.rows, b);
          EXPECT_TRUE(o.pdl);
          EXPECT_EQ(o.n, l.n);
          EXPECT_EQ(o.k, l.k);
          EXPECT_NE(StepPlan::describe(o).find("streaming"), std::string::npos) << StepPlan::describe(o);
        } else {
          EXPECT_EQ(StepPlan::describe(o), StepPlan::describe(l));
        }
      }
      // The INT4 head: the streaming kernel over the quantized rows (lm_head_int4 alone implies it).
      c.lm_head_int4 = true;
      const StepPlan q = build_step_plan(c, b);
      c.lm_head_int4 = false;
      const StepOp& head = q.ops[q.ops.size() - 3];
      ASSERT_EQ(head.kind, K::kLmHead);
      EXPECT_TRUE(head.lm_streaming && head.lm_int4 && head.pdl);
      EXPECT_EQ(head.rows, b);
      EXPECT_NE(StepPlan::describe(head).find("streaming int4"), std::string::npos)
          << StepPlan::describe(head);
    }
  }
}

TEST(StepPlan, GemmConfigsAreTheBatchInvariantHeuristics) {
  for (const std::string model : {"smollm2-135m", "llama-3.1-8b"}) {
    const StepPlanConfig c = config_for(model);
    const ModelConfig& m = c.model;
    const int H = m.hidden;
    for (int b : kDecodeBuckets) {
      SCOPED_TRACE(model + " bucket " + std::to_string(b));
      const StepPlan p = build_step_plan(c, b);
      int gemms = 0;
      for (const StepOp& op : p.ops) {
        if (op.kind != K::kGemm) continue;
        ++gemms;
        const int group = op.k % 128 == 0 ? 128 : 64;
        // The configuration QuantLinear::config(b) gives the same matrix, pdl off
        // (as the gemv in the fused buckets but for the O projection).
        cuda::DecodeConfig want = cuda::linear_config(cuda::DecodeWeights::kInt4, b, op.n, op.k, kSms, group);
        const bool gemv = b == 1 || (p.fused_norm && op.w.param != StepParam::kO);
        if (gemv) want = cuda::decode_as_gemv(want);
        EXPECT_TRUE(same(op.gemm, want)) << StepPlan::describe(op) << " vs " << cuda::describe(want);
        EXPECT_FALSE(op.gemm.pdl);
        // The K split: a function of (N, K) only, the same in every bucket.
        EXPECT_EQ(op.gemm.splits, cuda::decode_splits(cuda::DecodeWeights::kInt4, op.n, op.k, kSms, group))
            << StepPlan::describe(op);
        EXPECT_EQ(op.gemm.kernel, gemv ? cuda::DecodeKernel::kGemv : cuda::DecodeKernel::kSkinny);
        // Shapes of the weights it reads.
        switch (op.w.param) {
          case StepParam::kQkv:
            EXPECT_EQ(op.n, m.q_dim() + 2 * m.kv_dim());
            EXPECT_EQ(op.k, H);
            break;
          case StepParam::kO:
            EXPECT_EQ(op.n, H);
            EXPECT_EQ(op.k, m.q_dim());
            break;
          case StepParam::kGateUp:
            EXPECT_EQ(op.n, 2 * m.intermediate);
            EXPECT_EQ(op.k, H);
            break;
          case StepParam::kDown:
            EXPECT_EQ(op.n, H);
            EXPECT_EQ(op.k, m.intermediate);
            break;
          default: ADD_FAILURE() << "a GEMM of " << to_string(op.w.param); break;
        }
        EXPECT_EQ(op.w.layer, op.layer);
        EXPECT_FALSE(op.all_reduce);
      }
      EXPECT_EQ(gemms, 4 * m.n_layers);
    }
  }
}

TEST(StepPlan, AttentionSplitCountIsOneForEveryBucket) {
  for (KvFormat kv : {KvFormat::kBf16, KvFormat::kInt4, KvFormat::kInt4Rot})
    for (int ctx : {16, 1024, 8192}) {
      const StepPlanConfig c = config_for("llama-3.1-8b", kv, ctx);
      cuda::AttentionShape s1 = decode_attention_shape(c, 1);
      const cuda::AttentionConfig want =
          cuda::attention_heuristic_invariant(s1, kSms, kDecodeBuckets, kResident);
      EXPECT_EQ(s1.max_len, std::max(ctx, kDecodeMaxRows)) << "a padding row attends up to 32 positions";
      for (int b : kDecodeBuckets) {
        const StepPlan p = build_step_plan(c, b);
        EXPECT_EQ(p.attention.splits, want.splits) << "ctx " << ctx << " bucket " << b;
        EXPECT_EQ(p.attention_shape.batch, b);
        EXPECT_EQ(p.attention_shape.int4, kv != KvFormat::kBf16);
        EXPECT_EQ(p.attention_shape.rot_block, kv == KvFormat::kInt4Rot ? 64 : 0);
        EXPECT_EQ(p.attention_shape.group, c.model.n_heads / c.model.n_kv_heads);
      }
    }
}

TEST(StepPlan, BuffersOfTheFusedNormAndThePlainStep) {
  const StepPlanConfig c = config_for("smollm2-135m");
  const int L = c.model.n_layers;
  // One row: x alternates between x and x2 through the fused gemv; the final
  // norm reads the current residual and the head's input is a.
  const StepPlan p1 = build_step_plan(c, 1);
  StepAct cur = StepAct::kX;
  int fused = 0;
  for (const StepOp& op : p1.ops) {
    if (op.kind == K::kGemm && op.norm_in) {
      EXPECT_EQ(op.x, cur) << StepPlan::describe(op);
      EXPECT_EQ(op.x_out, cur == StepAct::kX ? StepAct::kX2 : StepAct::kX);
      EXPECT_EQ(op.add, StepAct::kY);
      EXPECT_EQ(op.gain.param, op.w.param == StepParam::kQkv ? StepParam::kAttnNorm : StepParam::kFfnNorm);
      EXPECT_EQ(op.gain.layer, op.layer);
      cur = op.x_out;
      ++fused;
    }
    if (op.kind == K::kNorm) {
      EXPECT_EQ(op.x, cur);
      EXPECT_EQ(op.w.param, StepParam::kOutNorm);
    }
    if (op.kind == K::kGemm && op.w.param == StepParam::kDown) {
      EXPECT_TRUE(op.x_swiglu);
      EXPECT_EQ(op.in, StepAct::kGu);
    }
  }
  EXPECT_EQ(fused, 2 * L - 1) << "every gate/up, every QKV but the first";
  // Eight rows fuse as one does: the same op list, every op over the bucket's rows.
  const StepPlan f8 = build_step_plan(c, 8);
  ASSERT_EQ(f8.ops.size(), p1.ops.size());
  for (size_t i = 0; i < f8.ops.size(); ++i) {
    const StepOp &a = f8.ops[i], &b = p1.ops[i];
    EXPECT_EQ(a.kind, b.kind) << StepPlan::describe(a);
    EXPECT_EQ(a.x, b.x) << StepPlan::describe(a);
    EXPECT_EQ(a.x_out, b.x_out) << StepPlan::describe(a);
    EXPECT_EQ(a.norm_in, b.norm_in) << StepPlan::describe(a);
    EXPECT_EQ(a.x_swiglu, b.x_swiglu) << StepPlan::describe(a);
  }
  // Several rows unfused (16 rows; 8 with fuse_norm_rows 4): one residual x,
  // norms between the projections, a swiglu op.
  StepPlanConfig c4 = c;
  c4.fuse_norm_rows = 4;
  EXPECT_TRUE(build_step_plan(c4, 4).fused_norm);
  const StepPlan p8 = build_step_plan(c4, 8);
  for (const StepOp& op : p8.ops) {
    EXPECT_FALSE(op.norm_in);
    EXPECT_FALSE(op.x_swiglu);
    EXPECT_NE(op.x, StepAct::kX2);
    EXPECT_NE(op.x_out, StepAct::kX2);
  }
  const std::vector<StepOp>& o = p8.ops;
  // Layer 0: qkv a->qkv, append, attention qkv->attn, o attn->y, norm(ffn[0]), gate_up a->gu, swiglu gu->sw,
  // down sw->y, norm(attn[1]).
  ASSERT_GE(o.size(), size_t(10));
  EXPECT_EQ(o[1].in, StepAct::kA);
  EXPECT_EQ(o[1].out, StepAct::kQkv);
  EXPECT_EQ(o[3].in, StepAct::kQkv);
  EXPECT_EQ(o[3].out, StepAct::kAttn);
  EXPECT_EQ(o[4].in, StepAct::kAttn);
  EXPECT_EQ(o[4].out, StepAct::kY);
  EXPECT_EQ(o[5].w.param, StepParam::kFfnNorm);
  EXPECT_EQ(o[5].w.layer, 0);
  EXPECT_EQ(o[6].out, StepAct::kGu);
  EXPECT_EQ(o[7].in, StepAct::kGu);
  EXPECT_EQ(o[7].out, StepAct::kSw);
  EXPECT_EQ(o[7].n, c.model.intermediate);
  EXPECT_EQ(o[8].in, StepAct::kSw);
  EXPECT_EQ(o[8].out, StepAct::kY);
  EXPECT_EQ(o[9].w.param, StepParam::kAttnNorm);
  EXPECT_EQ(o[9].w.layer, 1);
  const StepOp& head = o[o.size() - 3];
  EXPECT_EQ(head.in, StepAct::kA);
  EXPECT_EQ(head.n, c.lm_rows);
  EXPECT_EQ(head.k, c.model.hidden);
  EXPECT_EQ(head.w.param, StepParam::kLmHead);
}

// Every op reads only what an earlier op of the step wrote (the residual
// alternating between x and x2 included), and the attention of layer l reads
// the cache layer the append of layer l wrote before it.
TEST(StepPlan, EveryReadFollowsItsWrite) {
  for (const std::string model : {"smollm2-135m", "llama-3.1-8b"})
    for (bool fuse : {true, false})
      for (int b : kDecodeBuckets) {
        SCOPED_TRACE(model + " bucket " + std::to_string(b) + (fuse ? " fused norm" : ""));
        StepPlanConfig c = config_for(model);
        c.fuse_norm = fuse;
        const StepPlan p = build_step_plan(c, b);
        std::vector<bool> written(size_t(StepAct::kSampled) + 1, false);
        std::vector<bool> kv(size_t(c.model.n_layers), false);
        for (const StepOp& op : p.ops) {
          const StepAccess a = access(op);
          for (StepAct r : a.reads) {
            EXPECT_NE(r, StepAct::kNone) << StepPlan::describe(op);
            EXPECT_TRUE(written[size_t(r)])
                << StepPlan::describe(op) << " reads " << to_string(r) << " unwritten";
          }
          if (a.kv_read >= 0) {
            EXPECT_TRUE(kv[size_t(a.kv_read)]) << StepPlan::describe(op);
          }
          for (StepAct w : a.writes) {
            EXPECT_NE(w, StepAct::kNone) << StepPlan::describe(op);
            written[size_t(w)] = true;
          }
          if (a.kv_write >= 0) kv[size_t(a.kv_write)] = true;
        }
        for (int l = 0; l < c.model.n_layers; ++l) EXPECT_TRUE(kv[size_t(l)]) << "layer " << l << " appended";
        EXPECT_TRUE(written[size_t(StepAct::kRowStats)]);
      }
}

TEST(StepPlan, OptionsChangeTheListAsDocumented) {
  StepPlanConfig c = config_for("smollm2-135m");
  const int L = c.model.n_layers;
  c.fuse_norm = false;  // one row without the fused norm: 8 per layer, 4 more
  EXPECT_EQ(build_step_plan(c, 1).ops.size(), size_t(8 * L + 4));
  EXPECT_EQ(build_step_plan(c, 4).ops.size(), size_t(9 * L + 4));  // and 9 above one row
  c.gpu_sampling = false;                                          // no sample op
  for (int b : kDecodeBuckets) EXPECT_NE(build_step_plan(c, b).ops.back().kind, K::kSample);
  c.tensor_parallel = true;  // the O and down outputs summed over the ranks
  for (int b : {1, 16}) {
    int reduced = 0;
    for (const StepOp& op : build_step_plan(c, b).ops) {
      EXPECT_EQ(op.all_reduce,
                op.kind == K::kGemm && (op.w.param == StepParam::kO || op.w.param == StepParam::kDown));
      reduced += op.all_reduce ? 1 : 0;
    }
    EXPECT_EQ(reduced, 2 * L);
  }
}

TEST(StepPlan, DescribeAndBreakdownNames) {
  const StepPlan p = build_step_plan(config_for("smollm2-135m"), 1);
  const std::string d = p.describe();
  std::printf("%s", d.substr(0, d.find("L1 ")).c_str());
  EXPECT_EQ(size_t(std::count(d.begin(), d.end(), '\n')), p.ops.size() + 1) << "a header and a line per op";
  EXPECT_NE(d.find("L0 gemm qkv a -> qkv [1 x 960 x 576] gemv"), std::string::npos) << d.substr(0, 400);
  EXPECT_NE(d.find("L0 gemm gate_up rmsnorm(x + y, ffn_norm[0]) -> x2 -> gu [1 x 3072 x 576] gemv"),
            std::string::npos);
  EXPECT_NE(d.find("L1 gemm qkv rmsnorm(x2 + y, attn_norm[1]) -> x -> qkv"), std::string::npos);
  EXPECT_NE(d.find("L0 attention qkv, kv[0] -> attn [1] pdl"), std::string::npos);
  EXPECT_NE(d.find("lm_head a -> logits [32 x 49152 x 576] cublaslt"), std::string::npos);
  // The breakdown's names are futr bench --breakdown's rows (tests/gpu_engine/engine_test.cpp reads
  // "swiglu").
  EXPECT_STREQ(kBreakdownNames[kBdSwiglu], "swiglu");
  EXPECT_STREQ(kBreakdownNames[kBdQkv], "qkv gemm");
}

TEST(StepPlan, RefusesWhatIsNotABucket) {
  const StepPlanConfig c = config_for("smollm2-135m");
  EXPECT_FUTR_ERROR(build_step_plan(c, 3), "bucket 3");
  EXPECT_FUTR_ERROR(build_step_plan(c, 64), "bucket 64");
  StepPlanConfig bad = c;
  bad.gemms.pop_back();
  EXPECT_FUTR_ERROR(build_step_plan(bad, 1), "GEMM shapes");
}

}  // namespace
}  // namespace futr::gpu
