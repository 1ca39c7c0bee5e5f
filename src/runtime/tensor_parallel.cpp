// The Megatron-style partition plan and the host slicing helpers
// (runtime/tensor_parallel.h has the split and where the all-reduces go).
#include "runtime/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/number_formats.h"
#include "model/projection.h"
#include "quant/int4_pack.h"

namespace futr::runtime {

int TensorParallelPlan::q_heads_per_rank() const { return int(ranks.at(0).q_heads.size()); }
int TensorParallelPlan::kv_heads_per_rank() const { return int(ranks.at(0).kv_heads.size()); }
int TensorParallelPlan::ffn_per_rank() const { return int(ranks.at(0).ffn.size()); }
int TensorParallelPlan::qkv_rows_per_rank() const {
  return (q_heads_per_rank() + 2 * kv_heads_per_rank()) * head_dim;
}
int64_t TensorParallelPlan::max_vocab_shard() const { return (int64_t(vocab) + tp - 1) / tp; }

std::vector<int> valid_tp_sizes(const ModelConfig& c) {
  const int g = std::gcd(std::gcd(c.n_heads, c.n_kv_heads), c.intermediate);
  std::vector<int> out;
  for (int d = 1; d <= g; ++d)
    if (g % d == 0) out.push_back(d);
  if (out.empty()) out.push_back(1);  // g == 0: a config with zero fields
  return out;
}

namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// The part of [0, n) that rank r of N owns, balanced: the first n % N ranks
// get one more (so a size that divides gives n / N each).
IndexRange balanced(int64_t n, int r, int N) {
  const int64_t q = n / N, rem = n % N;
  const int64_t b = r * q + std::min<int64_t>(r, rem);
  return {b, b + q + (r < rem ? 1 : 0)};
}

}  // namespace

TensorParallelPlan make_tensor_parallel_plan(const ModelConfig& c, int tp) {
  FUTR_CHECK(
      c.hidden > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.head_dim > 0 && c.intermediate > 0 &&
          c.vocab > 0,
      "tensor parallel: the model config has a zero or negative size (hidden {}, n_heads {}, n_kv_heads "
      "{}, head_dim {}, intermediate {}, vocab {})",
      c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.intermediate, c.vocab);
  FUTR_CHECK(c.n_heads % c.n_kv_heads == 0,
             "tensor parallel: n_heads {} is not a multiple of n_kv_heads {} (not a GQA model)", c.n_heads,
             c.n_kv_heads);
  const std::vector<int> ok = valid_tp_sizes(c);
  FUTR_CHECK(tp >= 1,
             "tensor parallel: TP {} is out of range (at least 1; TP sizes that work for this model: {})", tp,
             join(ok));
  std::string why;
  auto need = [&](const char* field, int v, const char* reason) {
    if (v % tp == 0) return;
    why +=
        fmt::format("{}{} {} is not a multiple of TP {} ({})", why.empty() ? "" : "; ", field, v, tp, reason);
  };
  need("n_heads", c.n_heads, "each rank computes whole query heads");
  need("n_kv_heads", c.n_kv_heads, "each rank holds whole KV heads; they are divided, not replicated");
  need("intermediate", c.intermediate, "each rank computes whole SwiGLU pairs");
  FUTR_CHECK(
      why.empty(),
      "tensor parallel: cannot split the model over TP {} ranks: {}. TP sizes that work for this model "
      "(n_heads {}, n_kv_heads {}, intermediate {}): {}",
      tp, why, c.n_heads, c.n_kv_heads, c.intermediate, join(ok));

  TensorParallelPlan p;
  p.tp = tp;
  p.hidden = c.hidden;
  p.head_dim = c.head_dim;
  p.q_dim = c.q_dim();
  p.kv_dim = c.kv_dim();
  p.intermediate = c.intermediate;
  p.vocab = c.vocab;
  const int64_t D = c.head_dim, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
  const int64_t qh = c.n_heads / tp, kvh = c.n_kv_heads / tp, ffn = I / tp;
  for (int r = 0; r < tp; ++r) {
    RankShard s;
    s.rank = r;
    s.q_heads = {r * qh, (r + 1) * qh};
    s.kv_heads = {r * kvh, (r + 1) * kvh};
    s.q_rows = {s.q_heads.begin * D, s.q_heads.end * D};
    s.k_rows = {Q + s.kv_heads.begin * D, Q + s.kv_heads.end * D};
    s.v_rows = {Q + KV + s.kv_heads.begin * D, Q + KV + s.kv_heads.end * D};
    s.o_cols = s.q_rows;
    s.ffn = {r * ffn, (r + 1) * ffn};
    s.gate_rows = s.ffn;
    s.up_rows = {I + s.ffn.begin, I + s.ffn.end};
    s.down_cols = s.ffn;
    s.vocab = balanced(c.vocab, r, tp);
    p.ranks.push_back(s);
  }
  return p;
}

Tensor take_rows(const Tensor& w, std::initializer_list<IndexRange> ranges) {
  FUTR_CHECK(w.rank() == 2, "take_rows: expected a matrix, got shape {}", w.shape_str());
  const int64_t n = w.dim(0), k = w.dim(1);
  int64_t rows = 0;
  for (const IndexRange& r : ranges) {
    FUTR_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= n,
               "take_rows: rows [{}, {}) outside [0, {}) of {}", r.begin, r.end, n, w.shape_str());
    rows += r.size();
  }
  Tensor out({rows, k});
  float* dst = out.ptr();
  for (const IndexRange& r : ranges) {
    if (r.size() > 0) std::memcpy(dst, w.row(r.begin), size_t(r.size() * k) * sizeof(float));
    dst += r.size() * k;
  }
  return out;
}

Tensor take_cols(const Tensor& w, IndexRange cols) {
  FUTR_CHECK(w.rank() == 2, "take_cols: expected a matrix, got shape {}", w.shape_str());
  const int64_t n = w.dim(0), k = w.dim(1);
  FUTR_CHECK(0 <= cols.begin && cols.begin <= cols.end && cols.end <= k,
             "take_cols: columns [{}, {}) outside [0, {}) of {}", cols.begin, cols.end, k, w.shape_str());
  Tensor out({n, cols.size()});
  for (int64_t i = 0; i < n; ++i)
    if (cols.size() > 0) std::memcpy(out.row(i), w.row(i) + cols.begin, size_t(cols.size()) * sizeof(float));
  return out;
}

Tensor stack_rows(std::initializer_list<const Tensor*> parts) {
  FUTR_CHECK(parts.size() > 0, "stack_rows: no matrices");
  const int64_t k = (*parts.begin())->rank() == 2 ? (*parts.begin())->dim(1) : -1;
  int64_t rows = 0;
  for (const Tensor* t : parts) {
    FUTR_CHECK(t->rank() == 2 && t->dim(1) == k, "stack_rows: shape {} does not stack with width {}",
               t->shape_str(), k);
    rows += t->dim(0);
  }
  Tensor out({rows, k});
  float* dst = out.ptr();
  for (const Tensor* t : parts) {
    std::memcpy(dst, t->ptr(), size_t(t->numel()) * sizeof(float));
    dst += t->numel();
  }
  return out;
}

ShardMax shard_argmax(std::span<const float> logits, IndexRange vocab) {
  FUTR_CHECK(!logits.empty() && int64_t(logits.size()) == vocab.size(),
             "shard_argmax: {} logits for the vocabulary shard [{}, {})", logits.size(), vocab.begin,
             vocab.end);
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return {logits[best], vocab.begin + int64_t(best)};
}

ShardMax combine_shard_argmax(std::span<const ShardMax> shards) {
  FUTR_CHECK(!shards.empty(), "combine_shard_argmax: no shards");
  ShardMax best = shards[0];
  for (const ShardMax& s : shards.subspan(1))
    if (s.value > best.value || (s.value == best.value && s.id < best.id)) best = s;
  return best;
}

ModelConfig rank_config(const ModelConfig& c, const TensorParallelPlan& p) {
  FUTR_CHECK(p.tp >= 1 && int(p.ranks.size()) == p.tp, "rank_config: a plan of {} ranks", p.tp);
  ModelConfig r = c;
  r.n_heads = p.q_heads_per_rank();
  r.n_kv_heads = p.kv_heads_per_rank();
  r.intermediate = p.ffn_per_rank();
  return r;
}

namespace {

using Ranges = std::vector<std::pair<int, int>>;

// Rows `rows` (output channels) or input columns `cols` of one tensor.
quant::QuantizedTensor take(const quant::QuantizedTensor& t, const Ranges& rows, const IndexRange* cols) {
  quant::QuantizedTensor o;
  o.id = t.id;
  o.format = t.format;
  o.method = t.method;
  const std::string name = projection_name(t.id);
  switch (t.format) {
    case WeightFormat::kInt4:
      try {
        o.int4 = cols ? quant::int4_take_cols(t.int4, int(cols->begin), int(cols->end))
                      : quant::int4_take_rows(t.int4, rows);
      } catch (const Error& e) {
        fail("tensor parallelism: {} [{} x {}]: {}", name, t.n, t.k, e.what());
      }
      o.n = o.int4.n, o.k = o.int4.k;
      break;
    case WeightFormat::kFp8: {
      const quant::Fp8Weights& w = t.fp8;
      o.fp8.folded_gain = w.folded_gain;
      if (cols) {
        o.fp8.n = w.n, o.fp8.k = int(cols->size());
        o.fp8.scale = w.scale;
        for (int r = 0; r < w.n; ++r)
          o.fp8.w.insert(o.fp8.w.end(),
                         w.w.begin() + ptrdiff_t(size_t(r) * size_t(w.k) + size_t(cols->begin)),
                         w.w.begin() + ptrdiff_t(size_t(r) * size_t(w.k) + size_t(cols->end)));
      } else {
        o.fp8.k = w.k;
        for (const auto& [b, e] : rows) {
          o.fp8.w.insert(o.fp8.w.end(), w.w.begin() + ptrdiff_t(size_t(b) * size_t(w.k)),
                         w.w.begin() + ptrdiff_t(size_t(e) * size_t(w.k)));
          o.fp8.scale.insert(o.fp8.scale.end(), w.scale.begin() + b, w.scale.begin() + e);
          o.fp8.n += e - b;
        }
      }
      o.n = o.fp8.n, o.k = o.fp8.k;
      break;
    }
    case WeightFormat::kBf16: {
      if (cols) {
        o.n = t.n, o.k = int(cols->size());
        for (int r = 0; r < t.n; ++r)
          o.bf16.insert(o.bf16.end(),
                        t.bf16.begin() + ptrdiff_t(size_t(r) * size_t(t.k) + size_t(cols->begin)),
                        t.bf16.begin() + ptrdiff_t(size_t(r) * size_t(t.k) + size_t(cols->end)));
      } else {
        o.k = t.k;
        for (const auto& [b, e] : rows) {
          o.bf16.insert(o.bf16.end(), t.bf16.begin() + ptrdiff_t(size_t(b) * size_t(t.k)),
                        t.bf16.begin() + ptrdiff_t(size_t(e) * size_t(t.k)));
          o.n += e - b;
        }
      }
      break;
    }
    default:
      fail("tensor parallelism: {} is {}; the shards are cut from INT4, FP8 or BF16 projections", name,
           to_string(t.format));
  }
  return o;
}

}  // namespace

quant::QuantizedWeights shard_quantized_weights(const quant::QuantizedWeights& q, const TensorParallelPlan& p,
                                                int rank) {
  FUTR_CHECK(rank >= 0 && rank < p.tp, "tensor parallelism: rank {} of {}", rank, p.tp);
  const RankShard& s = p.ranks[size_t(rank)];
  quant::QuantizedWeights out;
  out.format = q.format;
  out.method = q.method;
  out.fp8_initial_amax = q.fp8_initial_amax;
  auto rows = [](IndexRange r, int64_t minus = 0) {
    return Ranges{{int(r.begin - minus), int(r.end - minus)}};
  };
  for (const auto& [id, t] : q.tensors) {
    if (id.layer < 0) continue;  // the LM head: sharded by vocabulary where it is used
    switch (id.proj) {
      case Projection::kQ: out.tensors[id] = take(t, rows(s.q_rows), nullptr); break;
      case Projection::kK: out.tensors[id] = take(t, rows(s.k_rows, p.q_dim), nullptr); break;
      case Projection::kV:
        out.tensors[id] = take(t, rows(s.v_rows, int64_t(p.q_dim) + p.kv_dim), nullptr);
        break;
      case Projection::kO: out.tensors[id] = take(t, {}, &s.o_cols); break;
      case Projection::kGate: out.tensors[id] = take(t, rows(s.gate_rows), nullptr); break;
      case Projection::kUp: out.tensors[id] = take(t, rows(s.up_rows, p.intermediate), nullptr); break;
      case Projection::kDown: out.tensors[id] = take(t, {}, &s.down_cols); break;
      case Projection::kLmHead: break;
    }
  }
  return out;
}

}  // namespace futr::runtime
