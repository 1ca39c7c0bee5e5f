// The GPU engine's KV cache (see kv_cache.h).
#include "gpu_engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"
#include "launch/check.h"
#include "model/rope.h"

namespace futr::gpu {

KvCache::KvCache(const ModelConfig& c, KvFormat kv, int rot_block, int ctx, int max_seqs, int scratch_slots,
                 size_t weights_est)
    : mirror_(kv != KvFormat::kBf16), rot_block_(kv == KvFormat::kInt4Rot ? rot_block : 0) {
  const int D = c.head_dim;
  const bool int4 = mirror_;
  FUTR_ASSERT(scratch_slots % layout::kKvSlotAlign == 0);  // keeps num_slots a multiple of 16
  // ---- does it fit? ----------------------------------------------------------------
  slots_per_seq_ = (ctx + layout::kKvSlotAlign - 1) / layout::kKvSlotAlign * layout::kKvSlotAlign;
  const int64_t seq_slots = int64_t(slots_per_seq_) * max_seqs;
  FUTR_CHECK(seq_slots + scratch_slots <= (int64_t(1) << 30),
             "GPU engine: {} sequences x ctx {} = {} KV slots, more "
             "than the cache addresses (2^30); what fits: fewer sequences or a smaller --ctx",
             max_seqs, ctx, seq_slots);
  // The padding rows' scratch region (engine.h): scratch_slots slots past every sequence's.
  scratch_base_ = int(seq_slots);
  num_slots_ = int(seq_slots) + scratch_slots;
  const size_t per_slot = size_t(c.n_layers) * c.n_kv_heads *
                          (size_t(D) * 2 * 2 + (int4 ? size_t(D) + 8 : 0));  // BF16 K+V, + nibbles and scales
  bytes_ = per_slot * size_t(num_slots_);
  size_t free_b = 0, total_b = 0;
  FUTR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t reserve = size_t(1) << 30;  // activations, workspaces, cuBLASLt, the CUDA context
  if (bytes_ + weights_est + reserve > free_b) {
    const size_t room = free_b > weights_est + reserve ? free_b - weights_est - reserve : 0;
    const long fit_seqs = long(room / (per_slot * size_t(slots_per_seq_)));
    const long fit_ctx = long(room / (per_slot * size_t(max_seqs))) / 16 * 16;
    fail(
        "GPU engine: the KV cache for {} sequences x ctx {} needs {:.1f} GiB, but {:.1f} GiB of GPU memory "
        "are "
        "free after the weights ({:.1f} GiB); what fits: {} sequences at ctx {}, or ctx {} for {} sequences",
        max_seqs, ctx, double(bytes_) / (1ull << 30), double(free_b) / (1ull << 30),
        double(weights_est) / (1ull << 30), fit_seqs, ctx, fit_ctx, max_seqs);
  }

  // ---- the layers ------------------------------------------------------------------
  layers_.resize(size_t(c.n_layers));
  for (Layer& L : layers_) {
    const size_t e = size_t(num_slots_) * c.n_kv_heads * D;
    L.k = cuda::DeviceBuffer<uint16_t>(e);
    L.v = cuda::DeviceBuffer<uint16_t>(e);
    L.k.fill_bytes(0);
    L.v.fill_bytes(0);
    if (int4) {
      const size_t nb = layout::kv_nibble_bytes(c.n_kv_heads, D, num_slots_);
      L.k4 = cuda::DeviceBuffer<uint8_t>(nb);
      L.v4 = cuda::DeviceBuffer<uint8_t>(nb);
      L.ks = cuda::DeviceBuffer<float>(size_t(num_slots_) * c.n_kv_heads);
      L.vs = cuda::DeviceBuffer<float>(size_t(num_slots_) * c.n_kv_heads);
      L.k4.fill_bytes(0x88);  // nibbles 8: zeros
      L.v4.fill_bytes(0x88);
      L.ks.fill_bytes(0);
      L.vs.fill_bytes(0);
    }
  }
  // Positions [0, scratch_slots) exist even for a shorter ctx: the padding rows use them.
  const RopeTable rope = make_rope_table(D, c.rope_theta, c.rope_scaling, std::max(ctx, scratch_slots));
  rope_cos_ = cuda::DeviceBuffer<float>(rope.cos);
  rope_sin_ = cuda::DeviceBuffer<float>(rope.sin);
}

layout::KvLayerPtrs KvCache::layer(int l) const {
  const Layer& L = layers_[size_t(l)];
  return {L.k.get(), L.v.get(), L.k4.get(), L.v4.get(), L.ks.get(), L.vs.get(), num_slots_};
}

}  // namespace futr::gpu
