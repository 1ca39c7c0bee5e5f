// Launcher, variant list and tile list of the prefill attention (see
// prefill_attention.h).
#include "launch/prefill_attention.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/sm90_prefill_attention.cuh"
#include "launch/check.h"
#include "launch/device.h"
#include "launch/launch.cuh"
#include "launch/tensor_map.h"

namespace futr::cuda {

namespace {

using Kernel = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, device::PrefillAttentionParams);

// ---- the compiled variants ------------------------------------------------------
struct Variant {
  int head_dim;
  Kernel kernel;
  int smem;
};
const Variant kVariants[] = {
    {64, &device::sm90_prefill_attention_kernel<64>, device::PrefillSmem<64>::kAlloc},
    {128, &device::sm90_prefill_attention_kernel<128>, device::PrefillSmem<128>::kAlloc},
};

const Variant& find_variant(int head_dim) {
  for (const Variant& v : kVariants)
    if (v.head_dim == head_dim) return v;
  fail("prefill attention: head_dim {} is not compiled (compiled: 64 and 128, BF16 cache; nearest: {})",
       head_dim, head_dim <= 96 ? 64 : 128);
}

}  // namespace

std::vector<std::string> prefill_attention_variants() {
  std::vector<std::string> out;
  for (const Variant& v : kVariants) out.push_back("bf16 d" + std::to_string(v.head_dim));
  return out;
}

std::vector<int> prefill_tiles(const std::vector<PrefillRequest>& reqs) {
  struct T {
    int req, row0;
    int64_t keys;  // the keys its last row reads: the tile's cost
  };
  std::vector<T> ts;
  for (size_t r = 0; r < reqs.size(); ++r) {
    FUTR_CHECK(reqs[r].n_rows >= 1, "prefill attention: request {} has {} rows", r, reqs[r].n_rows);
    for (int row0 = 0; row0 < reqs[r].n_rows; row0 += device::kPrefillBM) {
      const int last = std::min(row0 + device::kPrefillBM, reqs[r].n_rows) - 1;
      ts.push_back({int(r), row0, int64_t(reqs[r].pos0) + last + 1});
    }
  }
  std::stable_sort(ts.begin(), ts.end(), [](const T& a, const T& b) { return a.keys > b.keys; });
  std::vector<int> out;
  out.reserve(2 * ts.size());
  for (const T& t : ts) {
    out.push_back(t.req);
    out.push_back(t.row0);
  }
  return out;
}

void prefill_attention(const PrefillAttentionArgs& a, cudaStream_t st, bool pdl) {
  const Variant& v = find_variant(a.head_dim);
  FUTR_CHECK(a.kv_heads >= 1 && a.n_heads >= a.kv_heads && a.n_heads % a.kv_heads == 0,
             "prefill attention: {} query heads are not a multiple of {} KV heads", a.n_heads, a.kv_heads);
  FUTR_CHECK(a.n_heads <= 65535, "prefill attention: {} heads out of range", a.n_heads);
  FUTR_CHECK(a.rows >= 1 && a.n_tiles >= 1 && int64_t(a.n_tiles) * a.n_heads <= (int64_t(1) << 30),
             "prefill attention: {} rows in {} tiles x {} heads (1..2^30 items)", a.rows, a.n_tiles,
             a.n_heads);
  FUTR_CHECK(a.q && a.out && a.k && a.v && a.row_begin && a.n_rows && a.pos0 &&
                 (a.slot_base || a.blocks.tables) && a.tiles,
             "prefill attention: a pointer is null");
  const bool paged = a.blocks.tables != nullptr;
  FUTR_CHECK(
      !paged || (a.blocks.shift >= 4 && (1 << a.blocks.shift) <= device::kPrefillBN && a.blocks.stride > 0),
      "prefill attention: blocks of 2^{} slots: the paged cache's blocks are 16 .. {} slots", a.blocks.shift,
      device::kPrefillBN);
  const int box_rows = paged ? 1 << a.blocks.shift : device::kPrefillBN;
  const int64_t width = int64_t(a.n_heads) * a.head_dim;
  const int64_t q_ld = a.q_ld ? a.q_ld : width, out_ld = a.out_ld ? a.out_ld : width;
  FUTR_CHECK(q_ld >= width && out_ld >= width, "prefill attention: row strides {} / {} below {}", q_ld,
             out_ld, width);
  FUTR_CHECK(q_ld % 8 == 0, "prefill attention: the query row stride {} is not a multiple of 8 elements",
             q_ld);
  FUTR_CHECK(a.num_slots >= 16 && a.num_slots % layout::kKvSlotAlign == 0,
             "KV cache: num_slots {} must be a positive multiple of {}", a.num_slots, layout::kKvSlotAlign);

  const uint64_t kv_width = uint64_t(a.kv_heads) * a.head_dim;
  const CUtensorMap qmap = make_tensor_map_2d(a.q, TmaElem::kBF16, a.rows, width, q_ld * 2, 64, 64);
  const CUtensorMap kmap =
      make_tensor_map_2d(a.k, TmaElem::kBF16, a.num_slots, kv_width, kv_width * 2, box_rows, 64);
  const CUtensorMap vmap =
      make_tensor_map_2d(a.v, TmaElem::kBF16, a.num_slots, kv_width, kv_width * 2, box_rows, 64);

  device::PrefillAttentionParams p;
  p.tiles = reinterpret_cast<const device::PrefillTile*>(a.tiles);
  p.row_begin = a.row_begin;
  p.n_rows = a.n_rows;
  p.pos0 = a.pos0;
  p.slot_base = a.slot_base;
  p.blocks = a.blocks;
  p.out = static_cast<__nv_bfloat16*>(a.out);
  p.out_ld = out_ld;
  p.group = a.n_heads / a.kv_heads;
  p.n_heads = a.n_heads;
  p.n_items = a.n_tiles * a.n_heads;
  p.scale_log2 = float(1.4426950408889634 / std::sqrt(double(a.head_dim)));

  static const bool attr_set = [] {  // every variant, once per process (thread-safe), as the FP8 GEMM's
    for (const Variant& w : kVariants)
      FUTR_CUDA_CHECK(cudaFuncSetAttribute(w.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, w.smem));
    return true;
  }();
  (void)attr_set;
  // Persistent: one CTA per SM (the shared memory holds one), items strided over them.
  FUTR_CHECK(a.max_ctas >= 0, "prefill attention: max_ctas {} < 0", a.max_ctas);
  const int grid = std::min(p.n_items, a.max_ctas > 0 ? a.max_ctas : require_device().sm_count);
  launch(v.kernel, dim3(grid), dim3(device::kPrefillThreads), v.smem, st, pdl, qmap, kmap, vmap, p);
}

}  // namespace futr::cuda
