// Launchers, the explicit variant list and the split heuristic of the decode
// KV-cache kernels (see decode_attention.h).
#include "launch/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/sm90_decode_attention.cuh"
#include "kernels/sm90_kv_append.cuh"
#include "kernels/sm90_kv_append_rows.cuh"
#include "launch/check.h"
#include "launch/launch.cuh"

namespace futr::cuda {

namespace {

constexpr int kMaxGroup = 8;

using AttnFn = void (*)(device::DecodeAttentionParams);
using AppendFn = void (*)(device::KvAppendParams);

// ---- the compiled variants ------------------------------------------------------
// (rotation is a run-time flag of the INT4 variants: the query prologue and the
// output epilogue, not the main loop)
struct Variant {
  int head_dim;
  bool int4;
  AttnFn attn;
  AppendFn append;
};

#define FUTR_ATTN(D, INT4)                                                                                   \
  Variant {                                                                                                  \
    D, INT4, &device::sm90_decode_attention_kernel<D, INT4 ? device::KvKind::kInt4 : device::KvKind::kBf16>, \
        &device::sm90_kv_append_kernel<D>                                                                    \
  }

const Variant kVariants[] = {FUTR_ATTN(64, false), FUTR_ATTN(128, false), FUTR_ATTN(64, true),
                             FUTR_ATTN(128, true)};
#undef FUTR_ATTN

const Variant& find_variant(int head_dim, bool int4) {
  for (const Variant& v : kVariants)
    if (v.head_dim == head_dim && v.int4 == int4) return v;
  const int nearest = head_dim <= 96 ? 64 : 128;
  fail(
      "decode attention: head_dim {} is not compiled (compiled: head_dim 64 and 128 for the bf16, int4 "
      "and int4-rot caches; nearest: {})",
      head_dim, nearest);
}

void check_shape(const AttentionShape& s) {
  find_variant(s.head_dim, s.int4);
  FUTR_CHECK(s.batch >= 1 && s.batch <= 65535, "decode attention: batch {} out of range 1..65535", s.batch);
  FUTR_CHECK(s.kv_heads >= 1 && s.kv_heads <= 65535, "decode attention: kv_heads {} out of range",
             s.kv_heads);
  FUTR_CHECK(s.group >= 1 && s.group <= kMaxGroup,
             "decode attention: {} query heads per KV head are not compiled (1..{}; nearest: {})", s.group,
             kMaxGroup, std::clamp(s.group, 1, kMaxGroup));
  FUTR_CHECK(s.max_len >= 1, "decode attention: max_len must be >= 1 (got {})", s.max_len);
  if (s.rot_block != 0) {
    FUTR_CHECK(s.int4, "decode attention: the rotation applies to the INT4 mirror only");
    FUTR_CHECK(s.rot_block >= 2 && (s.rot_block & (s.rot_block - 1)) == 0 && s.head_dim % s.rot_block == 0,
               "decode attention: Hadamard block {} must be a power of two dividing head_dim {}", s.rot_block,
               s.head_dim);
  }
}

template <class T>
void check_aligned(const T* p, size_t bytes, const char* what) {
  FUTR_CHECK(p != nullptr, "decode attention: {} is null", what);
  FUTR_CHECK(reinterpret_cast<uintptr_t>(p) % bytes == 0, "decode attention: {} must be {}-byte aligned",
             what, bytes);
}

// A paged cache's tables: blocks of 16 .. 2^20 slots, a power of two that is
// a multiple of 16 (whole 16-slot steps per block), a positive row stride.
void check_blocks(const layout::KvBlockTable& t, const char* what) {
  if (!t.tables) return;
  FUTR_CHECK(
      t.shift >= 4 && t.shift <= 20 && t.stride > 0,
      "{}: block tables of blocks of 2^{} slots, {} entries per sequence: blocks are 16 .. 2^20 slots, "
      "at least one entry",
      what, t.shift, t.stride);
  check_aligned(t.tables, 4, "the block tables");
}

void check_cache(const KvLayerPtrs& c, bool int4) {
  FUTR_CHECK(c.num_slots >= 16 && c.num_slots % layout::kKvSlotAlign == 0,
             "KV cache: num_slots {} must be a positive multiple of {}", c.num_slots, layout::kKvSlotAlign);
  if (int4) {
    check_aligned(c.k4, 16, "the mirror's K nibbles");
    check_aligned(c.v4, 16, "the mirror's V nibbles");
    check_aligned(c.ks, 4, "the mirror's K scales");
    check_aligned(c.vs, 4, "the mirror's V scales");
  } else {
    check_aligned(c.k, 16, "the BF16 K cache");
    check_aligned(c.v, 16, "the BF16 V cache");
  }
}

// Chunks each CTA reduces, and the CTAs of one (sequence, KV head).
int attention_chunks_per_cta(const AttentionConfig& c) {
  const int ctas = c.ctas > 0 ? c.ctas : c.splits;
  return (c.splits + ctas - 1) / ctas;
}
int attention_grid_x(const AttentionConfig& c) {
  const int per = attention_chunks_per_cta(c);
  return (c.splits + per - 1) / per;
}

device::DecodeAttentionParams params(const AttentionShape& s, const AttentionArgs& a,
                                     const AttentionConfig& c) {
  device::DecodeAttentionParams p;
  p.q = static_cast<const __nv_bfloat16*>(a.q);
  p.q_ld = a.q_ld ? a.q_ld : int64_t(s.kv_heads) * s.group * s.head_dim;
  p.out = static_cast<__nv_bfloat16*>(a.out);
  p.slot_base = a.slot_base;
  p.blocks = a.blocks;
  p.kv_len = a.kv_len;
  p.cache = a.cache;
  p.kv_heads = s.kv_heads;
  p.group = s.group;
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(s.head_dim)));
  p.rot_block = s.rot_block;
  p.splits = c.splits;
  p.chunks_per_cta = attention_chunks_per_cta(c);
  const size_t rows = size_t(s.batch) * s.kv_heads * s.group;
  p.o_part = c.splits > 1 ? a.ws : nullptr;
  p.ml_part = c.splits > 1 ? a.ws + rows * size_t(c.splits) * s.head_dim : nullptr;
  p.counters = a.counters;
  return p;
}

}  // namespace

std::string describe(const AttentionConfig& c) {
  std::string out = "splits=" + std::to_string(c.splits);
  if (c.ctas > 0 && c.ctas < c.splits) out += " ctas=" + std::to_string(attention_grid_x(c));
  return out;
}

int attention_occupancy(const AttentionShape& s) {
  check_shape(s);
  const Variant& v = find_variant(s.head_dim, s.int4);
  int n = 0;
  FUTR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, v.attn, device::kAttnWarps * 32, 0));
  FUTR_CHECK(n > 0, "decode attention: the variant does not fit on one SM");
  return n;
}

AttentionConfig attention_heuristic(const AttentionShape& s, int sm_count, int resident_per_sm,
                                    int min_tokens, int overhead_tokens) {
  check_shape(s);
  FUTR_CHECK(sm_count >= 1, "decode attention: sm_count must be >= 1");
  if (resident_per_sm <= 0) resident_per_sm = attention_occupancy(s);
  const double resident = double(resident_per_sm) * sm_count;
  const long base = long(s.batch) * s.kv_heads;
  const long most = std::clamp(long(std::ceil(double(s.max_len) / std::max(16, min_tokens))), 1L,
                               long(device::kAttnMaxSplits));
  AttentionConfig best;
  double best_t = 0;
  for (long sp = 1; sp <= most; ++sp) {
    const double waves = std::ceil(double(base * sp) / resident);
    const double t = waves * (double(s.max_len) / double(sp) + overhead_tokens);
    if (sp == 1 || t < best_t * 0.999) {
      best_t = t;
      best.splits = int(sp);
    }
  }
  // Few (sequence, KV head) pairs at a short context: the wave model leaves
  // most SMs idle, and the kernel is latency-bound there. Measured on the
  // H200 (8B shape, batch 1, ctx 1024, BF16; docs/PERF.md): 4 splits 15.3 us,
  // 8: 12.0, 16: 11.2, 32: 12.3. So fill up to one CTA per SM, with at least
  // kShortSplitTokens keys per CTA (longer contexts reach whole waves above).
  constexpr long kShortSplitTokens = 64;
  if (base * best.splits < sm_count) {
    const long fill = std::min(long(sm_count) / base, long(std::ceil(double(s.max_len) / kShortSplitTokens)));
    best.splits = int(std::clamp(std::max(fill, long(best.splits)), 1L, long(device::kAttnMaxSplits)));
  }
  return best;
}

AttentionConfig attention_heuristic_invariant(const AttentionShape& s, int sm_count,
                                              std::span<const int> batches, int resident_per_sm,
                                              int overhead_tokens) {
  check_shape(s);
  FUTR_CHECK(sm_count >= 1 && !batches.empty(),
             "decode attention: sm_count >= 1 and a batch list are needed");
  if (resident_per_sm <= 0) resident_per_sm = attention_occupancy(s);
  const double resident = double(resident_per_sm) * sm_count;
  // Chunks of at least 64 keys (the short-context rule of attention_heuristic).
  const long most = std::clamp(long(std::ceil(double(s.max_len) / 64.0)), 1L, long(device::kAttnMaxSplits));
  // One CTA per chunk: a CTA reducing chunks in turn (attention_ctas) pays
  // each chunk's merge and the restart of its loads (~1.2-1.6 us per chunk on
  // the H200), so the count that suits one CTA per chunk stays the better one.
  auto cost = [&](int batch, long sp) {
    const double waves = std::ceil(double(long(batch) * s.kv_heads * sp) / resident);
    return waves * (double(s.max_len) / double(sp) + overhead_tokens);
  };
  std::vector<double> best(batches.size(), 1e300);
  for (size_t b = 0; b < batches.size(); ++b)
    for (long sp = 1; sp <= most; ++sp) best[b] = std::min(best[b], cost(batches[b], sp));
  AttentionConfig out;
  double best_total = 1e300;
  for (long sp = 1; sp <= most; ++sp) {
    double total = 0;
    for (size_t b = 0; b < batches.size(); ++b) total += cost(batches[b], sp) / best[b];
    if (total < best_total * 0.999) best_total = total, out.splits = int(sp);
  }
  return out;
}

AttentionConfig attention_ctas(const AttentionShape& s, int splits, int sm_count, int resident_per_sm,
                               int overhead_tokens, int chunk_overhead_tokens) {
  check_shape(s);
  FUTR_CHECK(sm_count >= 1, "decode attention: sm_count must be >= 1");
  FUTR_CHECK(splits >= 1 && splits <= device::kAttnMaxSplits,
             "decode attention: splits {} out of range 1..{}", splits, device::kAttnMaxSplits);
  if (resident_per_sm <= 0) resident_per_sm = attention_occupancy(s);
  const double resident = double(resident_per_sm) * sm_count;
  const double chunk = double(s.max_len) / splits + chunk_overhead_tokens;
  AttentionConfig best{splits, splits};
  double best_t = 0;
  for (int c = 1; c <= splits; ++c) {
    const AttentionConfig cfg{splits, c};
    const int per = attention_chunks_per_cta(cfg), grid = attention_grid_x(cfg);
    if (grid != c) continue;  // the same launch as a smaller count
    const double waves = std::ceil(double(s.batch) * s.kv_heads * grid / resident);
    const double t = waves * (per * chunk + overhead_tokens);
    if (c == 1 || t < best_t * 0.999) best_t = t, best.ctas = c;
  }
  return best;
}

std::vector<std::string> attention_variants() {
  std::vector<std::string> out;
  for (const Variant& v : kVariants) {
    const std::string tail =
        " d" + std::to_string(v.head_dim) + " (group 1.." + std::to_string(kMaxGroup) + ")";
    if (v.int4) {
      out.push_back("int4" + tail);
      out.push_back("int4-rot" + tail);
    } else {
      out.push_back("bf16" + tail);
    }
  }
  return out;
}

size_t attention_workspace_floats(const AttentionShape& s, const AttentionConfig& c) {
  if (c.splits <= 1) return 0;
  return size_t(s.batch) * s.kv_heads * s.group * size_t(c.splits) * size_t(s.head_dim + 2);
}

void decode_attention(const AttentionShape& s, const AttentionArgs& a, const AttentionConfig& c,
                      cudaStream_t st, bool pdl) {
  check_shape(s);
  const Variant& v = find_variant(s.head_dim, s.int4);
  FUTR_CHECK(c.splits >= 1 && c.splits <= device::kAttnMaxSplits,
             "decode attention: splits {} out of range 1..{}", c.splits, device::kAttnMaxSplits);
  FUTR_CHECK(c.ctas >= 0 && c.ctas <= c.splits, "decode attention: ctas {} out of range 0..splits ({})",
             c.ctas, c.splits);
  check_aligned(static_cast<const __nv_bfloat16*>(a.q), 16, "q");
  FUTR_CHECK(a.q_ld == 0 || a.q_ld >= int64_t(s.kv_heads) * s.group * s.head_dim,
             "decode attention: q row stride {} is shorter than a row", a.q_ld);
  check_aligned(static_cast<const __nv_bfloat16*>(a.out), 16, "out");
  FUTR_CHECK((a.slot_base || a.blocks.tables) && a.kv_len,
             "decode attention: slot_base (or block tables) and kv_len must be set");
  check_blocks(a.blocks, "decode attention");
  check_cache(a.cache, s.int4);
  const size_t need = attention_workspace_floats(s, c);
  FUTR_CHECK(a.ws_floats >= need, "decode attention: workspace of {} floats, the configuration needs {}",
             a.ws_floats, need);
  if (need) {
    check_aligned(a.ws, 16, "the split workspace");
    FUTR_CHECK(a.counters && a.n_counters >= attention_counters(s),
               "decode attention: {} split counters given, the batch needs {} (zeroed once)", a.n_counters,
               attention_counters(s));
  }
  const device::DecodeAttentionParams p = params(s, a, c);
  launch(v.attn, dim3(unsigned(attention_grid_x(c)), unsigned(s.kv_heads), unsigned(s.batch)),
         dim3(device::kAttnWarps * 32), 0, st, pdl, p);
}

size_t attention_counters(const AttentionShape& s) { return size_t(s.batch) * size_t(s.kv_heads); }

namespace {

// Validates the append arguments (both kernels take the same) and packs them.
device::KvAppendParams append_params(const KvAppendArgs& a) {
  find_variant(a.head_dim, true);
  FUTR_CHECK(a.rows >= 0 && a.rows <= (1 << 24), "KV append: rows {} out of range", a.rows);
  FUTR_CHECK(a.kv_heads >= 1 && a.kv_heads <= 16, "KV append: kv_heads {} is not compiled (1..16)",
             a.kv_heads);
  FUTR_CHECK(a.ld >= int64_t(a.kv_heads) * a.head_dim, "KV append: row stride {} < kv_heads * head_dim",
             a.ld);
  FUTR_CHECK(a.k && a.v && a.row_seq && a.row_pos && (a.slot_base || a.blocks.tables),
             "KV append: a pointer is null");
  check_blocks(a.blocks, "KV append");
  FUTR_CHECK(a.cache.k && a.cache.v, "KV append: the BF16 cache is not set");
  if (a.mirror) check_cache(a.cache, true);
  if (a.rot_block != 0)
    FUTR_CHECK(a.mirror && a.rot_block >= 2 && (a.rot_block & (a.rot_block - 1)) == 0 &&
                   a.head_dim % a.rot_block == 0,
               "KV append: Hadamard block {} must be a power of two dividing head_dim {} (mirror only)",
               a.rot_block, a.head_dim);
  FUTR_CHECK(!a.rope_cos == !a.rope_sin, "KV append: RoPE needs both the cos and the sin table");
  FUTR_CHECK(a.q_heads >= 0 && (a.q_heads == 0 || (a.q && (a.rope_cos || a.bias))),
             "KV append: {} query heads need q and the RoPE tables or the biases", a.q_heads);
  FUTR_CHECK(!a.bias || (a.q && a.q_heads > 0),
             "KV append: the q/k/v biases need q and its heads (the q bias is added in place)");
  device::KvAppendParams p;
  p.k = static_cast<const __nv_bfloat16*>(a.k);
  p.v = static_cast<const __nv_bfloat16*>(a.v);
  p.ld = a.ld;
  p.row_seq = a.row_seq;
  p.row_pos = a.row_pos;
  p.slot_base = a.slot_base;
  p.blocks = a.blocks;
  p.cache = a.cache;
  p.rows = a.rows;
  p.kv_heads = a.kv_heads;
  p.rot_block = a.rot_block;
  p.mirror = a.mirror;
  p.nonfinite = a.nonfinite;
  p.rope_cos = a.rope_cos;
  p.rope_sin = a.rope_sin;
  p.q = static_cast<__nv_bfloat16*>(a.q);
  p.q_heads = a.q_heads;
  p.bias = a.bias;
  return p;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void kv_append(const KvAppendArgs& a, cudaStream_t st, bool pdl) {
  const device::KvAppendParams p = append_params(a);
  if (a.rows == 0) return;
  launch(find_variant(a.head_dim, true).append, dim3(unsigned(a.rows)), dim3(unsigned(64 * a.kv_heads)), 0,
         st, pdl, p);
}

void kv_append_rows(const KvAppendArgs& a, cudaStream_t st, bool pdl) {
  const device::KvAppendParams p = append_params(a);
  FUTR_CHECK(a.ld % 8 == 0 && aligned16(a.k) && aligned16(a.v) && (!a.q || aligned16(a.q)) &&
                 (!a.rope_cos || (aligned16(a.rope_cos) && aligned16(a.rope_sin))),
             "KV append (rows): 16-byte accesses need ld % 8 == 0 (got {}) and 16-byte aligned k, v, q and "
             "RoPE tables",
             a.ld);
  if (a.rows == 0) return;
  const int per_cta = device::kv_append_rows_per_cta(a.kv_heads, a.head_dim, a.mirror);
  const size_t smem = a.mirror ? size_t(per_cta) * 2 * size_t(a.kv_heads) * size_t(a.head_dim) * 4 : 0;
  auto* kernel =
      a.head_dim == 64 ? &device::sm90_kv_append_rows_kernel<64> : &device::sm90_kv_append_rows_kernel<128>;
  launch(kernel, dim3(unsigned((a.rows + per_cta - 1) / per_cta)), dim3(device::kKvRowsThreads), smem, st,
         pdl, p, per_cta);
}

}  // namespace futr::cuda
