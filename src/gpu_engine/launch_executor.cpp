// The launch executor (see launch_executor.h).
#include "gpu_engine/launch_executor.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "gpu_engine/device_weights.h"
#include "gpu_engine/kv_cache.h"
#include "gpu_engine/nccl.h"
#include "gpu_engine/profiler.h"
#include "launch/cublaslt.h"
#include "launch/linear.h"
#include "launch/lm_head.h"

namespace futr::gpu {

// ---- StepBuffers --------------------------------------------------------------------

StepBuffers::StepBuffers(const ModelConfig& c, int lm_rows, const cuda::AttentionShape& shape,
                         const cuda::AttentionConfig& attention, int table_stride_)
    : table_stride(table_stride_) {
  const int B = kDecodeMaxRows;
  const int H = c.hidden, q_dim = c.q_dim(), kv_dim = c.kv_dim(), I = c.intermediate;
  x = cuda::DeviceBuffer<float>(size_t(B) * H);
  x2 = cuda::DeviceBuffer<float>(size_t(cuda::kDecodeGemvMaxRows) * H);
  a = cuda::DeviceBuffer<uint16_t>(size_t(B) * H);
  a.fill_bytes(0);  // the LM head reads all kDecodeMaxRows rows
  qkv = cuda::DeviceBuffer<uint16_t>(size_t(B) * (q_dim + 2 * kv_dim));
  attn = cuda::DeviceBuffer<uint16_t>(size_t(B) * q_dim);
  y = cuda::DeviceBuffer<uint16_t>(size_t(B) * H);
  gu = cuda::DeviceBuffer<uint16_t>(size_t(B) * 2 * I);
  sw = cuda::DeviceBuffer<uint16_t>(size_t(B) * I);
  logits = cuda::DeviceBuffer<float>(size_t(B) * size_t(lm_rows));
  ints = cuda::DeviceBuffer<int>(size_t(kMapRows) * B);
  if (table_stride > 0) {
    tables = cuda::DeviceBuffer<int>(size_t(B) * size_t(table_stride));
    tables.fill_bytes(0);
  }
  row_stats = cuda::DeviceBuffer<cuda::LogitsRowStats>(size_t(B));
  samplers = cuda::DeviceBuffer<cuda::SampleRow>(size_t(B));
  samplers.fill_bytes(0);
  sampled = cuda::DeviceBuffer<int>(size_t(B));
  nonfinite = cuda::DeviceBuffer<int>(1);
  nonfinite.fill_bytes(0);
  attn_ws =
      cuda::DeviceBuffer<float>(std::max<size_t>(1, cuda::attention_workspace_floats(shape, attention)));
  attn_counters = cuda::DeviceBuffer<int>(cuda::attention_counters(shape));
  attn_counters.fill_bytes(0);
}

void* StepBuffers::get(StepAct act) const {
  switch (act) {
    case StepAct::kNone: return nullptr;
    case StepAct::kX: return x.get();
    case StepAct::kX2: return x2.get();
    case StepAct::kA: return a.get();
    case StepAct::kQkv: return qkv.get();
    case StepAct::kAttn: return attn.get();
    case StepAct::kY: return y.get();
    case StepAct::kGu: return gu.get();
    case StepAct::kSw: return sw.get();
    case StepAct::kLogits: return logits.get();
    case StepAct::kRowStats: return row_stats.get();
    case StepAct::kSampled: return sampled.get();
  }
  return nullptr;
}

// ---- LaunchExecutor -----------------------------------------------------------------

LaunchExecutor::LaunchExecutor(const DeviceWeights& w, const KvCache& kv, StepBuffers& b, cuda::CublasLt& lt,
                               const Options& o)
    : w_(w), kv_(kv), b_(b), lt_(lt), o_(o) {}

namespace {

const cuda::W4Linear& matrix(const DeviceWeights& w, const StepRef& r) {
  const DeviceWeights::Layer& L = w.layer(r.layer);
  switch (r.param) {
    case StepParam::kQkv: return *L.qkv;
    case StepParam::kO: return *L.o;
    case StepParam::kGateUp: return *L.gate_up;
    case StepParam::kDown: return *L.down;
    default: break;
  }
  fail("step plan: {} is not a GEMM's matrix", to_string(r.param));
}

const uint16_t* gain(const DeviceWeights& w, const StepRef& r) {
  switch (r.param) {
    case StepParam::kAttnNorm: return w.layer(r.layer).attn_norm.get();
    case StepParam::kFfnNorm: return w.layer(r.layer).ffn_norm.get();
    case StepParam::kOutNorm: return w.out_norm();
    default: break;
  }
  fail("step plan: {} is not an RMSNorm gain", to_string(r.param));
}

// The streaming LM head over the BF16 rows or the INT4 ones.
cuda::LmHeadArgs lm_head_args(const DeviceWeights& w, bool int4, const void* x, float* out, int rows, int n,
                              int k) {
  cuda::LmHeadArgs a{w.lm_head_rows(), x, out, 0, rows, n, k};
  if (int4) {
    FUTR_CHECK(w.lm_head_int4(), "step plan: the INT4 LM head was not quantized");
    a.w = w.lm_head_int4();
    a.scales = w.lm_head_int4_scales();
    a.group = w.lm_head_int4_group();
  }
  return a;
}

}  // namespace

void LaunchExecutor::enqueue(const StepPlan& plan, cudaStream_t st, Profiler* prof) const {
  const StepBuffers& m = b_;
  // PDL for the ops the plan marks; a profiled step launches one by one with an event after each.
  const bool pdl_on = o_.pdl && !prof;
  const cuda::AttentionShape& shape = plan.attention_shape;
  if (prof) prof->begin(st);
  for (const StepOp& op : plan.ops) {
    const bool pdl = pdl_on && op.pdl;
    switch (op.kind) {
      case StepOpKind::kEmbedNorm:
      case StepOpKind::kNorm: {
        cuda::RmsNormArgs norm;
        norm.x = static_cast<float*>(m.get(op.x));
        norm.out = m.get(op.out);
        norm.rows = op.rows;
        norm.H = op.n;
        norm.eps = o_.rms_eps;
        norm.embd = w_.embd();
        norm.gain = gain(w_, op.w);
        if (op.kind == StepOpKind::kEmbedNorm) {
          norm.tokens = m.map(kTok);  // x = E[token]; a = RMSNorm(x) g
        } else {
          norm.add = m.get(op.add);  // x += add; a = RMSNorm(x) g
          norm.ld_add = op.n;
        }
        cuda::rmsnorm(norm, st, pdl);
        break;
      }
      case StepOpKind::kGemm: {
        const cuda::W4Linear& w = matrix(w_, op.w);
        cuda::DecodeConfig cfg = op.gemm;
        cfg.pdl = pdl;
        if (op.norm_in) {  // x_out = x + add; the input bf16(RMSNorm(x_out) gain)
          const cuda::DecodeNormInput n{static_cast<const float*>(m.get(op.x)),
                                        static_cast<const uint16_t*>(m.get(op.add)), gain(w_, op.gain),
                                        static_cast<float*>(m.get(op.x_out)), o_.rms_eps};
          w.forward(nullptr, m.get(op.out), op.rows, cfg, st, false, &n);
        } else {
          w.forward(m.get(op.in), m.get(op.out), op.rows, cfg, st, op.x_swiglu);
        }
        if (op.all_reduce)
          o_.tp_comms->all_reduce_bf16(m.get(op.out), size_t(op.rows) * size_t(op.n), o_.tp_rank, st);
        break;
      }
      case StepOpKind::kRopeAppend: {
        // RoPE of q and k fused into the append (bit-identical to cuda::rope + kv_append), the
        // q/k/v biases too where the model has them.
        const int q_dim = shape.kv_heads * shape.group * shape.head_dim,
                  kv_dim = shape.kv_heads * shape.head_dim;
        uint16_t* qkv = static_cast<uint16_t*>(m.get(op.in));
        cuda::KvAppendArgs ap;
        ap.k = qkv + q_dim;
        ap.v = qkv + q_dim + kv_dim;
        ap.ld = q_dim + 2 * kv_dim;
        ap.row_seq = m.map(kRow);
        ap.row_pos = m.map(kPos);
        ap.slot_base = kv_.paged() ? nullptr : m.map(kBase);
        ap.blocks = block_tables();
        ap.cache = kv_.layer(op.layer);
        ap.rows = op.rows;
        ap.kv_heads = shape.kv_heads;
        ap.head_dim = shape.head_dim;
        ap.mirror = shape.int4;
        ap.rot_block = shape.rot_block;
        ap.nonfinite = m.nonfinite.get();
        ap.rope_cos = kv_.rope_cos();
        ap.rope_sin = kv_.rope_sin();
        ap.q = qkv;
        ap.q_heads = shape.kv_heads * shape.group;
        const cuda::DeviceBuffer<float>& bias = w_.layer(op.layer).qkv_bias;
        ap.bias = bias.size() ? bias.get() : nullptr;  // qwen2: the q/k/v biases, before RoPE
        cuda::kv_append(ap, st, pdl);
        break;
      }
      case StepOpKind::kAttention: {
        const int64_t qkv_n = int64_t(shape.kv_heads) * (shape.group + 2) * shape.head_dim;
        cuda::AttentionArgs aa;
        aa.q = m.get(op.in);
        aa.out = m.get(op.out);
        aa.slot_base = kv_.paged() ? nullptr : m.map(kBase);  // paged: the rows' block tables
        aa.kv_len = m.map(kLen);
        aa.cache = kv_.layer(op.layer);
        aa.ws = m.attn_ws.get();
        aa.ws_floats = m.attn_ws.size();
        aa.counters = m.attn_counters.get();
        aa.n_counters = m.attn_counters.size();
        aa.q_ld = qkv_n;
        aa.blocks = block_tables();
        cuda::decode_attention(shape, aa, plan.attention, st, pdl);
        break;
      }
      case StepOpKind::kSwiglu: cuda::swiglu(m.get(op.in), m.get(op.out), op.rows, op.n, st, pdl); break;
      case StepOpKind::kLmHead:
        if (op.lm_streaming)
          cuda::lm_head(lm_head_args(w_, op.lm_int4, m.get(op.in), static_cast<float*>(m.get(op.out)),
                                     op.rows, op.n, op.k),
                        st, pdl);
        else
          lt_.matmul(cuda::LtInput::kBF16, m.get(op.in), w_.lm_head_rows(), m.get(op.out), op.rows, op.n,
                     op.k, nullptr, nullptr, st, cuda::LtOutput::kF32);
        break;
      case StepOpKind::kLogitsReduce: {
        cuda::LogitsReduceArgs ra;
        ra.logits = static_cast<const float*>(m.get(op.in));
        ra.vocab = op.n;
        ra.rows = op.rows;
        ra.targets = m.map(kTarget);
        ra.out = static_cast<cuda::LogitsRowStats*>(m.get(op.out));
        cuda::logits_reduce(ra, st, pdl);
        break;
      }
      case StepOpKind::kSample: {
        cuda::SampleArgs sa;
        sa.logits = static_cast<const float*>(m.get(op.in));
        sa.ld = w_.lm_rows();
        sa.vocab = op.n;
        sa.rows = op.rows;
        sa.samplers = m.samplers.get();
        sa.out = static_cast<int*>(m.get(op.out));
        cuda::sample_topk(sa, st, pdl);
        break;
      }
    }
    if (prof) prof->mark(op.breakdown, st);
  }
}

void LaunchExecutor::run(const StepPlan& plan, cudaStream_t st, Profiler* prof) {
  const size_t k =
      size_t(std::find(kDecodeBuckets.begin(), kDecodeBuckets.end(), plan.bucket) - kDecodeBuckets.begin());
  FUTR_ASSERT(k < kDecodeBuckets.size());
  if (prof && warm_[k]) {
    // Profiled: the step captured with an event node after every launch (no
    // PDL), replayed once: GPU times without the host's launch costs.
    cuda::Graph::capture(st, [&](cudaStream_t s) { enqueue(plan, s, prof); }).launch(st);
  } else if (o_.graphs && warm_[k]) {
    if (!graphs_[k].valid())
      graphs_[k] = cuda::Graph::capture(st, [&](cudaStream_t s) { enqueue(plan, s, nullptr); });
    graphs_[k].launch(st);
    ++graph_launches_;
  } else {
    enqueue(plan, st, prof);
    warm_[k] = true;
  }
}

void LaunchExecutor::enqueue_outputs(int rows, const uint16_t* x_rows, cudaStream_t st) {
  StepBuffers& m = b_;
  const int H = o_.hidden;
  cuda::RmsNormArgs norm;  // x = the residual row (gathered from the chunk's rows); a = RMSNorm(x) g_out
  norm.x = m.x.get();
  norm.tokens = m.map(kTok);
  norm.embd = x_rows;
  norm.gain = w_.out_norm();
  norm.out = m.a.get();
  norm.rows = rows;
  norm.H = H;
  norm.eps = o_.rms_eps;
  cuda::rmsnorm(norm, st);
  // As the decode step's head: the same kernel, the same bits (cuBLASLt over kDecodeMaxRows rows).
  if (o_.lm_head_streaming || o_.lm_head_int4)
    cuda::lm_head(lm_head_args(w_, o_.lm_head_int4, m.a.get(), m.logits.get(), rows, w_.lm_rows(), H), st);
  else
    lt_.matmul(cuda::LtInput::kBF16, m.a.get(), w_.lm_head_rows(), m.logits.get(), kDecodeMaxRows,
               w_.lm_rows(), H, nullptr, nullptr, st, cuda::LtOutput::kF32);
  cuda::LogitsReduceArgs ra;
  ra.logits = m.logits.get();
  ra.vocab = w_.lm_rows();
  ra.rows = rows;
  ra.targets = m.map(kTarget);
  ra.out = m.row_stats.get();
  cuda::logits_reduce(ra, st);
}

layout::KvBlockTable LaunchExecutor::block_tables() const {
  if (!kv_.paged()) return {};
  FUTR_ASSERT(b_.table_stride > 0);
  return {b_.tables.get(), b_.table_stride, kv_.block_shift()};
}

int LaunchExecutor::graphs_captured() const {
  int n = 0;
  for (const cuda::Graph& g : graphs_) n += g.valid() ? 1 : 0;
  return n;
}

}  // namespace futr::gpu
