// Launchers of the decode-step KV-cache kernels: the cache append and the
// split-KV decode attention over the BF16 primary cache or the INT4 mirror
// (rotated or not). Layouts: src/kernels/layout/kv_cache.cuh, docs/LAYOUTS.md.
//
//   kv_append():        new K/V rows -> BF16 primary (+ INT4 mirror), by a row map
//   kv_append_rows():   the same for a prefill chunk (many rows per launch)
//   decode_attention(): one query row per sequence, GQA, softmax in FP32,
//                       BF16 out; with splits > 1 the last CTA of each
//                       (sequence, KV head) merges the chunks (one launch).
//
// Only the variants listed in attention_variants() are compiled (head_dim x
// cache kind; any GQA group up to 8); any other request fails with a
// futr::Error naming the nearest compiled one. The split count comes from
// attention_heuristic() or the caller (the benchmark overrides it). All
// launches are graph-capturable: no allocation, no synchronization; the split
// workspace and counters are the caller's. Kernels: sm90_kv_append.cuh,
// sm90_decode_attention.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/layout/kv_cache.cuh"

namespace futr::cuda {

using KvLayerPtrs = layout::KvLayerPtrs;

// The static shape of one attention launch.
struct AttentionShape {
  int batch = 1;  // sequences (one query row each)
  int kv_heads = 8;
  int group = 4;  // query heads per KV head (n_heads = kv_heads * group)
  int head_dim = 128;
  bool int4 = true;   // read the INT4 mirror (else the BF16 primary)
  int rot_block = 0;  // mirror rotated with this Hadamard block (0: not rotated)
  int max_len = 1;    // the longest sequence the launch may see (sizes the split)
};

struct AttentionConfig {
  int splits = 1;  // context chunks per (sequence, KV head), 1..512; 1: no merge
  int ctas = 0;    // CTAs per (sequence, KV head), 1..splits, each reducing ceil(splits / ctas)
                   // chunks in turn (0: one per chunk). The output depends on `splits` only.
};

// One line: "splits=16" or "splits=16 ctas=2".
std::string describe(const AttentionConfig& c);

// The split count minimizing the modelled time of batch x kv_heads x splits
// CTAs in waves of `resident` = resident_per_sm x sm_count CTAs:
//     T(splits) = ceil(CTAs / resident) * (max_len / splits + overhead_tokens)
// (whole waves: a partial last wave costs a full one), with chunks of at least
// min_tokens tokens; ties go to fewer splits (a smaller combine pass).
// When that leaves SMs idle (batch x KV heads x splits < SMs), the count is
// raised to one CTA per SM, at least 64 keys each (short contexts, small batches).
// resident_per_sm = 0: the variant's occupancy on the current device.
AttentionConfig attention_heuristic(const AttentionShape& s, int sm_count, int resident_per_sm = 0,
                                    int min_tokens = 256, int overhead_tokens = 128);

// One split count for every batch size in `batches` (s.batch ignored), so a
// sequence's context is cut into the same chunks, merged in the same order,
// whatever other sequences share the launch (batch invariance: the chunking
// depends on the sequence's own length and this count only). The count
// minimizes the sum over `batches` of each batch size's modelled time (the
// wave model above, chunks of at least 64 keys) relative to its own best.
AttentionConfig attention_heuristic_invariant(const AttentionShape& s, int sm_count,
                                              std::span<const int> batches, int resident_per_sm = 0,
                                              int overhead_tokens = 128);

// CTAs per (sequence, KV head) for a batch of s.batch sequences when every
// batch uses `splits` chunks (attention_heuristic_invariant): the count in
// 1..splits minimizing the wave model of attention_heuristic with
// ceil(splits / ctas) chunks per CTA, each chunk costing chunk_overhead_tokens
// (its merge, its partial and the restart of its loads: measured on the H200,
// 8B shape, ctx 1024, 8 chunks: ~1.2-1.6 us each) and each CTA overhead_tokens.
// Large batches fill the GPU with few CTAs per sequence (batch 32: 43.8 us
// with 2, 50.6 with 8), small ones take one CTA per chunk.
AttentionConfig attention_ctas(const AttentionShape& s, int splits, int sm_count, int resident_per_sm = 0,
                               int overhead_tokens = 128, int chunk_overhead_tokens = 64);

// CTAs of the variant for `s` resident per SM (cudaOccupancy...; needs a GPU).
int attention_occupancy(const AttentionShape& s);

// "int4 d128", "int4-rot d64", "bf16 d128", ... (each: any group up to 8).
std::vector<std::string> attention_variants();

struct AttentionArgs {
  const void* q = nullptr;         // [batch] rows of n_heads * D BF16 (row stride q_ld elements)
  void* out = nullptr;             // [batch][n_heads][D] BF16
  const int* slot_base = nullptr;  // [batch] device: first slot of each sequence (multiple of 16)
  const int* kv_len = nullptr;     // [batch] device: tokens each query attends (<= max_len)
  KvLayerPtrs cache;
  float* ws = nullptr;  // split workspace, >= attention_workspace_floats()
  size_t ws_floats = 0;
  int* counters = nullptr;  // split arrival counters, >= attention_counters(); zero them
  size_t n_counters = 0;    // once (cudaMemset): every launch leaves them zero
  int64_t q_ld = 0;         // 0: n_heads * D (contiguous rows)
  // A paged cache (docs/LAYOUTS.md, "Paged KV cache"): [batch] rows of block
  // ids instead of slot_base (then null); blocks of 16 .. 2^20 slots, a power of two.
  layout::KvBlockTable blocks;
};

// Floats of split workspace the configuration needs (0 for splits == 1).
size_t attention_workspace_floats(const AttentionShape& s, const AttentionConfig& c);
// Split arrival counters a launch needs (one per sequence and KV head; used when splits > 1).
size_t attention_counters(const AttentionShape& s);

// Validates shape, configuration, pointers and workspace, then launches on `st`.
// pdl: launched as a programmatic dependent (launch/launch.cuh); the kernel waits first.
void decode_attention(const AttentionShape& s, const AttentionArgs& a, const AttentionConfig& c,
                      cudaStream_t st, bool pdl = false);

struct KvAppendArgs {
  const void* k = nullptr;  // [rows] rows of kv_heads * D BF16, stride ld elements
  const void* v = nullptr;
  int64_t ld = 0;
  const int* row_seq = nullptr;    // [rows] device
  const int* row_pos = nullptr;    // [rows] device
  const int* slot_base = nullptr;  // [sequences] device
  layout::KvBlockTable blocks;     // or a paged cache's block tables, [sequences] rows (slot_base null)
  KvLayerPtrs cache;
  int rows = 0, kv_heads = 0, head_dim = 0;
  bool mirror = false;       // write the INT4 mirror too
  int rot_block = 0;         // its Hadamard block (0: not rotated)
  int* nonfinite = nullptr;  // optional device counter of non-finite rows
  // Optional RoPE fused in (sm90_kv_append.cuh): with rope_cos/rope_sin set
  // ([max_pos][D/2] FP32, model/rope.h), K is rotated at row_pos before it is
  // written and the q_heads heads at q (row stride ld) are rotated in place:
  // the same bits as cuda::rope over q and k followed by kv_append.
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  void* q = nullptr;
  int q_heads = 0;
  // Optional q/k/v projection biases (qwen2), [q_heads * D | kv_heads * D |
  // kv_heads * D] FP32 on the device: added to q (in place), k and v, each
  // value rounded to BF16, before the RoPE. Needs q and q_heads.
  const float* bias = nullptr;
};

// The decode step's append: one CTA per row (sm90_kv_append.cuh).
void kv_append(const KvAppendArgs& a, cudaStream_t st, bool pdl = false);
// The same bytes for a prefill chunk of many rows: several rows per CTA,
// 16-byte accesses (sm90_kv_append_rows.cuh). Also needs ld % 8 == 0 and
// 16-byte aligned k, v, q and RoPE tables.
void kv_append_rows(const KvAppendArgs& a, cudaStream_t st, bool pdl = false);

}  // namespace futr::cuda
