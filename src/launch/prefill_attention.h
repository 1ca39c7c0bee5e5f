// Launcher of the prefill attention (kernels/sm90_prefill_attention.cuh):
// causal GQA attention of packed prompt chunks over the BF16 KV cache, each
// chunk attending to its request's prefix and to itself.
//
//   prefill_tiles():      the work list (128-row tiles of every request,
//                         heaviest first) the launch reads from the device;
//   prefill_attention():  validates and launches (graph-capturable: no
//                         allocation, no synchronization).
//
// Compiled variants: head_dim 64 and 128 (any GQA group); anything else fails
// with a futr::Error naming the nearest. The tensor maps are built per call
// from the pointers (host work only, ~1 us each).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/layout/kv_cache.cuh"

namespace futr::cuda {

// One request of a packed prefill batch (host view).
struct PrefillRequest {
  int row_begin = 0;  // packed index of its first new row
  int n_rows = 0;     // new rows (>= 1)
  int pos0 = 0;       // position of the first new row (its prefix in the cache)
  int slot_base = 0;  // cache slot of position 0 (multiple of 16)
};

// The device tile list of device::PrefillTile {req, row0} (two ints per tile),
// heaviest first: what prefill_attention() reads.
std::vector<int> prefill_tiles(const std::vector<PrefillRequest>& reqs);

std::vector<std::string> prefill_attention_variants();  // "bf16 d64", "bf16 d128"

struct PrefillAttentionArgs {
  const void* q = nullptr;  // [rows] rows of n_heads * D BF16, row stride q_ld elements (16-byte multiple)
  void* out = nullptr;      // [rows] rows of n_heads * D BF16, row stride out_ld elements
  int64_t q_ld = 0, out_ld = 0;
  int rows = 0;  // packed rows in q / out
  int n_heads = 0, kv_heads = 0, head_dim = 0;
  const uint16_t* k = nullptr;  // one layer's BF16 cache [num_slots][kv_heads][D] (layout/kv_cache.cuh)
  const uint16_t* v = nullptr;
  int num_slots = 0;
  // Device arrays (requests entries each): row_begin, n_rows, pos0, slot_base;
  // and the tile list from prefill_tiles() with n_tiles tiles.
  const int* row_begin = nullptr;
  const int* n_rows = nullptr;
  const int* pos0 = nullptr;
  const int* slot_base = nullptr;
  // Or a paged cache (docs/LAYOUTS.md, "Paged KV cache"; slot_base null):
  // [requests] rows of block ids, blocks of 16 .. 128 slots (a power of two).
  layout::KvBlockTable blocks;
  const int* tiles = nullptr;
  int n_tiles = 0;
  int max_ctas = 0;  // persistent CTAs; 0: one per SM (tests use a few, so each takes many items)
};

// pdl: launched as a programmatic dependent (launch/launch.cuh); the kernel waits first.
void prefill_attention(const PrefillAttentionArgs& a, cudaStream_t st, bool pdl = false);

}  // namespace futr::cuda
