// The decode micro-step as data (see step_plan.h).
#include "gpu_engine/step_plan.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>

#include "core/error.h"
#include "launch/linear.h"

namespace futr::gpu {

const std::array<const char*, kBreakdownRows> kBreakdownNames = {"embedding + rmsnorm",
                                                                 "qkv gemm",
                                                                 "rope + kv append",
                                                                 "attention",
                                                                 "o gemm",
                                                                 "residual + rmsnorm (attn)",
                                                                 "gate_up gemm",
                                                                 "swiglu",
                                                                 "down gemm (+ swiglu in the gemv)",
                                                                 "residual + rmsnorm (ffn)",
                                                                 "lm head (cublaslt)",
                                                                 "logits reduce",
                                                                 "sampling"};

const char* to_string(StepOpKind k) {
  switch (k) {
    case StepOpKind::kEmbedNorm: return "embed_norm";
    case StepOpKind::kGemm: return "gemm";
    case StepOpKind::kRopeAppend: return "rope_append";
    case StepOpKind::kAttention: return "attention";
    case StepOpKind::kNorm: return "norm";
    case StepOpKind::kSwiglu: return "swiglu";
    case StepOpKind::kLmHead: return "lm_head";
    case StepOpKind::kLogitsReduce: return "logits_reduce";
    case StepOpKind::kSample: return "sample";
  }
  return "?";
}

const char* to_string(StepAct a) {
  switch (a) {
    case StepAct::kNone: return "-";
    case StepAct::kX: return "x";
    case StepAct::kX2: return "x2";
    case StepAct::kA: return "a";
    case StepAct::kQkv: return "qkv";
    case StepAct::kAttn: return "attn";
    case StepAct::kY: return "y";
    case StepAct::kGu: return "gu";
    case StepAct::kSw: return "sw";
    case StepAct::kLogits: return "logits";
    case StepAct::kRowStats: return "row_stats";
    case StepAct::kSampled: return "sampled";
  }
  return "?";
}

const char* to_string(StepParam p) {
  switch (p) {
    case StepParam::kNone: return "-";
    case StepParam::kEmbd: return "embd";
    case StepParam::kAttnNorm: return "attn_norm";
    case StepParam::kFfnNorm: return "ffn_norm";
    case StepParam::kOutNorm: return "out_norm";
    case StepParam::kQkv: return "qkv";
    case StepParam::kO: return "o";
    case StepParam::kGateUp: return "gate_up";
    case StepParam::kDown: return "down";
    case StepParam::kLmHead: return "lm_head";
  }
  return "?";
}

std::vector<std::array<StepPlanConfig::Gemm, 4>> StepPlanConfig::default_gemms(const ModelConfig& c) {
  auto g = [](int n, int k) { return Gemm{n, k, k % 128 == 0 ? 128 : 64}; };
  const int H = c.hidden;
  return std::vector<std::array<Gemm, 4>>(
      size_t(c.n_layers),
      {g(c.q_dim() + 2 * c.kv_dim(), H), g(H, c.q_dim()), g(2 * c.intermediate, H), g(H, c.intermediate)});
}

cuda::AttentionShape decode_attention_shape(const StepPlanConfig& c, int batch) {
  const ModelConfig& m = c.model;
  return {batch,
          m.n_kv_heads,
          m.n_heads / m.n_kv_heads,
          m.head_dim,
          c.kv != KvFormat::kBf16,
          c.kv == KvFormat::kInt4Rot ? c.kv_block : 0,
          std::max(c.ctx, kDecodeMaxRows)};
}

cuda::AttentionConfig decode_attention_config(const StepPlanConfig& c) {
  return cuda::attention_heuristic_invariant(decode_attention_shape(c, 1), c.sm_count, kDecodeBuckets,
                                             c.attention_resident_per_sm);
}

StepPlan build_step_plan(const StepPlanConfig& c, int bucket) {
  const ModelConfig& m = c.model;
  FUTR_CHECK(std::find(kDecodeBuckets.begin(), kDecodeBuckets.end(), bucket) != kDecodeBuckets.end(),
             "step plan: bucket {} is not one of 1, 2, 4, 8, 16, 32", bucket);
  FUTR_CHECK(int(c.gemms.size()) == m.n_layers && m.n_layers >= 1, "step plan: {} GEMM shapes for {} layers",
             c.gemms.size(), m.n_layers);
  const int B = bucket, H = m.hidden;
  auto config = [&](int l, int p) {
    const StepPlanConfig::Gemm& g = c.gemms[size_t(l)][size_t(p)];
    return cuda::linear_config(cuda::DecodeWeights::kInt4, B, g.n, g.k, c.sm_count, g.group);
  };
  StepPlan plan;
  plan.bucket = B;
  plan.attention_shape = decode_attention_shape(c, B);
  plan.attention = decode_attention_config(c);
  // A sequence's chunks reduced by fewer CTAs at large batch: the same bits.
  if (c.attention_ctas)
    plan.attention = cuda::attention_ctas(plan.attention_shape, plan.attention.splits, c.sm_count,
                                          c.attention_resident_per_sm);
  // Micro-steps of 1..fuse_norm_rows rows (at most the gemv's 8) with
  // fuse_norm: the QKV and gate/up projections run as gemv with the residual
  // add + RMSNorm in their input staging, and the down projection as a gemv
  // staging the SwiGLU (x alternates between x and x2, xr: the current
  // residual): six launches per layer instead of eight or nine. The gemv
  // computes a row's bits as the skinny kernel does (the same K split), and
  // the fused norm sums as sm90_rmsnorm does: a row's logits stay the same in
  // any bucket. A shape whose rows' x slices would take more than
  // kGemvRowsSmem of shared memory per CTA keeps the separate kernels.
  auto gemv_fits = [&](int l, int p) {
    const StepPlanConfig::Gemm& g = c.gemms[size_t(l)][size_t(p)];
    return cuda::decode_gemv_smem(cuda::decode_as_gemv(config(l, p)), B, g.k, g.group) <= kGemvRowsSmem;
  };
  auto every_layer_fits = [&](std::initializer_list<int> projections) {
    for (int l = 0; l < m.n_layers; ++l)
      for (int p : projections)
        if (!gemv_fits(l, p)) return false;
    return true;
  };
  plan.fused_norm =
      c.fuse_norm && H <= cuda::kDecodeNormMaxK &&
      (B == 1 || (B <= std::min(c.fuse_norm_rows, cuda::kDecodeGemvMaxRows) && every_layer_fits({0, 2})));
  // The gemv (M <= 8) and sk (M <= 8) kernels take the SwiGLU into the down
  // projection's input staging (same bits as the separate kernel; one launch less).
  const bool down_gemv = B == 1 || (plan.fused_norm && every_layer_fits({3}));
  auto kernel_config = [&](int l, int p) {
    const bool gemv = B > 1 && ((plan.fused_norm && (p == 0 || p == 2)) || (p == 3 && down_gemv));
    return gemv ? cuda::decode_as_gemv(config(l, p)) : config(l, p);
  };
  const cuda::DecodeKernel down_kernel = kernel_config(0, 3).kernel;
  plan.swiglu_in_down =
      down_kernel == cuda::DecodeKernel::kGemv || down_kernel == cuda::DecodeKernel::kStreamK;
  const bool fuse = plan.fused_norm;
  StepAct xr = StepAct::kX, xo = StepAct::kX2;
  std::vector<StepOp>& ops = plan.ops;

  auto gemm = [&](int l, int p, StepParam w, StepAct in, StepAct out, int row) {
    const StepPlanConfig::Gemm& g = c.gemms[size_t(l)][size_t(p)];
    StepOp op;
    op.kind = StepOpKind::kGemm;
    op.layer = l;
    op.rows = B;
    op.w = {w, l};
    op.in = in;
    op.out = out;
    op.n = g.n;
    op.k = g.k;
    op.gemm = kernel_config(l, p);
    op.breakdown = row;
    return op;
  };
  // x += y; a = bf16(RMSNorm(x) g) inside the gemv (every row of the bucket).
  auto gemm_norm = [&](int l, int p, StepParam w, StepParam gain, StepAct out, int row) {
    StepOp op = gemm(l, p, w, StepAct::kNone, out, row);
    op.norm_in = true;
    op.x = xr;
    op.x_out = xo;
    op.add = StepAct::kY;
    op.gain = {gain, l};
    std::swap(xr, xo);
    return op;
  };
  auto norm = [&](int l, StepRef gain, int row) {
    StepOp op;
    op.kind = StepOpKind::kNorm;
    op.layer = l;
    op.rows = B;
    op.w = gain;
    op.x = xr;
    op.add = StepAct::kY;
    op.out = StepAct::kA;
    op.n = H;
    op.breakdown = row;
    return op;
  };

  // x = E[token]; a = RMSNorm(x) g_attn[0]: the first kernel, after the host's copy of the row map.
  {
    StepOp op;
    op.kind = StepOpKind::kEmbedNorm;
    op.rows = B;
    op.w = {StepParam::kAttnNorm, 0};
    op.x = StepAct::kX;
    op.out = StepAct::kA;
    op.n = H;
    op.pdl = false;
    op.breakdown = kBdEmbedNorm;
    ops.push_back(op);
  }
  for (int l = 0; l < m.n_layers; ++l) {
    if (fuse && l > 0)
      ops.push_back(gemm_norm(l, 0, StepParam::kQkv, StepParam::kAttnNorm, StepAct::kQkv, kBdQkv));
    else ops.push_back(gemm(l, 0, StepParam::kQkv, StepAct::kA, StepAct::kQkv, kBdQkv));
    {
      StepOp op;  // RoPE of q and k fused into the append (bit-identical to rope + append)
      op.kind = StepOpKind::kRopeAppend;
      op.layer = l;
      op.rows = B;
      op.in = StepAct::kQkv;
      op.breakdown = kBdRopeAppend;
      ops.push_back(op);
    }
    {
      StepOp op;
      op.kind = StepOpKind::kAttention;
      op.layer = l;
      op.rows = B;
      op.in = StepAct::kQkv;
      op.out = StepAct::kAttn;
      op.breakdown = kBdAttention;
      ops.push_back(op);
    }
    StepOp o = gemm(l, 1, StepParam::kO, StepAct::kAttn, StepAct::kY, kBdOProj);
    o.all_reduce = c.tensor_parallel;
    ops.push_back(o);
    if (fuse) {
      ops.push_back(gemm_norm(l, 2, StepParam::kGateUp, StepParam::kFfnNorm, StepAct::kGu, kBdGateUp));
    } else {
      ops.push_back(norm(l, {StepParam::kFfnNorm, l}, kBdNormAttn));
      ops.push_back(gemm(l, 2, StepParam::kGateUp, StepAct::kA, StepAct::kGu, kBdGateUp));
    }
    StepOp down;
    if (plan.swiglu_in_down) {
      down = gemm(l, 3, StepParam::kDown, StepAct::kGu, StepAct::kY, kBdDown);
      down.x_swiglu = true;
    } else {
      StepOp sw;
      sw.kind = StepOpKind::kSwiglu;
      sw.layer = l;
      sw.rows = B;
      sw.in = StepAct::kGu;
      sw.out = StepAct::kSw;
      sw.n = m.intermediate;
      sw.breakdown = kBdSwiglu;
      ops.push_back(sw);
      down = gemm(l, 3, StepParam::kDown, StepAct::kSw, StepAct::kY, kBdDown);
    }
    down.all_reduce = c.tensor_parallel;
    ops.push_back(down);
    if (!fuse || l + 1 == m.n_layers) {
      const StepRef gain =
          l + 1 < m.n_layers ? StepRef{StepParam::kAttnNorm, l + 1} : StepRef{StepParam::kOutNorm, -1};
      ops.push_back(norm(l, gain, kBdNormFfn));  // x += down; a = RMSNorm(x) g_next
    }
  }
  // The LM head. cuBLASLt: always over kDecodeMaxRows rows (rows >= B hold
  // stale inputs, their logits unread): cuBLASLt picks its kernel, and so the
  // summation order, by M; one M keeps every row's logits the same bits in any
  // bucket. Ours: the bucket's rows (its order does not depend on M).
  {
    StepOp op;
    op.kind = StepOpKind::kLmHead;
    op.lm_streaming = c.lm_head_streaming || c.lm_head_int4;
    op.lm_int4 = c.lm_head_int4;
    op.rows = op.lm_streaming ? B : kDecodeMaxRows;
    op.w = {StepParam::kLmHead, -1};
    op.in = StepAct::kA;
    op.out = StepAct::kLogits;
    op.n = c.lm_rows;
    op.k = H;
    op.pdl = op.lm_streaming;  // cuBLASLt: a plain launch
    op.breakdown = kBdLmHead;
    ops.push_back(op);
  }
  {
    StepOp op;
    op.kind = StepOpKind::kLogitsReduce;
    op.rows = B;
    op.in = StepAct::kLogits;
    op.out = StepAct::kRowStats;
    op.n = c.lm_rows;
    op.breakdown = kBdReduce;
    ops.push_back(op);
  }
  if (c.gpu_sampling) {  // the sampled rows' tokens (rows with top_k 0 return at once)
    StepOp op;
    op.kind = StepOpKind::kSample;
    op.rows = B;
    op.in = StepAct::kLogits;
    op.out = StepAct::kSampled;
    op.n = c.sampleable_vocab;
    op.breakdown = kBdSample;
    ops.push_back(op);
  }
  return plan;
}

StepAccess access(const StepOp& op) {
  StepAccess a;
  switch (op.kind) {
    case StepOpKind::kEmbedNorm: a.writes = {op.x, op.out}; break;
    case StepOpKind::kNorm:
      a.reads = {op.x, op.add};
      a.writes = {op.x, op.out};
      break;
    case StepOpKind::kGemm:
      if (op.norm_in) {
        a.reads = {op.x, op.add};
        a.writes = {op.x_out, op.out};
      } else {
        a.reads = {op.in};
        a.writes = {op.out};
      }
      break;
    case StepOpKind::kRopeAppend:  // k, v into the cache; q rotated in place
      a.reads = {op.in};
      a.writes = {op.in};
      a.kv_write = op.layer;
      break;
    case StepOpKind::kAttention:
      a.reads = {op.in};
      a.writes = {op.out};
      a.kv_read = op.layer;
      break;
    case StepOpKind::kSwiglu:
    case StepOpKind::kLmHead:
    case StepOpKind::kLogitsReduce:
    case StepOpKind::kSample:
      a.reads = {op.in};
      a.writes = {op.out};
      break;
  }
  return a;
}

std::string StepPlan::describe(const StepOp& op) {
  std::string s = op.layer >= 0 ? fmt::format("L{} ", op.layer) : std::string();
  auto ref = [](const StepRef& r) {
    return r.layer >= 0 ? fmt::format("{}[{}]", to_string(r.param), r.layer)
                        : std::string(to_string(r.param));
  };
  s += to_string(op.kind);
  switch (op.kind) {
    case StepOpKind::kGemm:
      s += fmt::format(" {} ", to_string(op.w.param));
      if (op.norm_in)
        s += fmt::format("rmsnorm({} + {}, {}) -> {}", to_string(op.x), to_string(op.add), ref(op.gain),
                         to_string(op.x_out));
      else s += fmt::format("{}{}", op.x_swiglu ? "swiglu " : "", to_string(op.in));
      s += fmt::format(" -> {} [{} x {} x {}] {}{}", to_string(op.out), op.rows, op.n, op.k,
                       cuda::describe(op.gemm), op.all_reduce ? " all-reduce" : "");
      break;
    case StepOpKind::kEmbedNorm:
      s += fmt::format(" rmsnorm(embd[tok], {}) -> {}, {} [{} x {}]", ref(op.w), to_string(op.x),
                       to_string(op.out), op.rows, op.n);
      break;
    case StepOpKind::kNorm:
      s += fmt::format(" rmsnorm({} += {}, {}) -> {} [{} x {}]", to_string(op.x), to_string(op.add),
                       ref(op.w), to_string(op.out), op.rows, op.n);
      break;
    case StepOpKind::kLmHead:
      s +=
          fmt::format(" {} -> {} [{} x {} x {}] {}", to_string(op.in), to_string(op.out), op.rows, op.n, op.k,
                      op.lm_int4        ? "streaming int4"
                      : op.lm_streaming ? "streaming"
                                        : "cublaslt");
      break;
    case StepOpKind::kRopeAppend:
      s += fmt::format(" {}: k, v -> kv[{}], q rotated in place [{}]", to_string(op.in), op.layer, op.rows);
      break;
    case StepOpKind::kAttention:
      s += fmt::format(" {}, kv[{}] -> {} [{}]", to_string(op.in), op.layer, to_string(op.out), op.rows);
      break;
    case StepOpKind::kSwiglu:
      s += fmt::format(" {} -> {} [{} x {}]", to_string(op.in), to_string(op.out), op.rows, op.n);
      break;
    default: s += fmt::format(" {} -> {} [{}]", to_string(op.in), to_string(op.out), op.rows); break;
  }
  if (op.pdl) s += " pdl";
  return s;
}

std::string StepPlan::describe() const {
  std::string s = fmt::format("bucket {}: {} ops; attention {}{}{}\n", bucket, ops.size(),
                              cuda::describe(attention), fused_norm ? "; norms fused into the gemv" : "",
                              swiglu_in_down ? "; swiglu staged by the down gemm" : "");
  for (const StepOp& op : ops) s += describe(op) + "\n";
  return s;
}

}  // namespace futr::gpu
