// The GPU engine's KV cache (see kv_cache.h).
#include "gpu_engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"
#include "launch/check.h"
#include "model/rope.h"

namespace futr::gpu {

KvCache::KvCache(const ModelConfig& c, KvFormat kv, int rot_block, int ctx, int max_seqs, int scratch_slots,
                 size_t weights_est, const KvPaging& paging)
    : mirror_(kv != KvFormat::kBf16),
      rot_block_(kv == KvFormat::kInt4Rot ? rot_block : 0),
      kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim) {
  const int D = c.head_dim;
  const bool int4 = mirror_;
  FUTR_ASSERT(scratch_slots % layout::kKvSlotAlign == 0);  // keeps num_slots a multiple of 16
  const size_t per_slot = size_t(c.n_layers) * c.n_kv_heads *
                          (size_t(D) * 2 * 2 + (int4 ? size_t(D) + 8 : 0));  // BF16 K+V, + nibbles and scales
  size_t free_b = 0, total_b = 0;
  FUTR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t reserve = size_t(1) << 30;  // activations, workspaces, cuBLASLt, the CUDA context
  const size_t room = free_b > weights_est + reserve ? free_b - weights_est - reserve : 0;
  // ---- does it fit? ----------------------------------------------------------------
  if (paging.block_size > 0) {
    const int B = paging.block_size;
    FUTR_CHECK(B >= 16 && B <= 128 && (B & (B - 1)) == 0,
               "GPU engine: --block-size {}: the GPU's KV blocks are 16, 32, 64 or 128 positions", B);
    FUTR_CHECK(paging.blocks >= 0, "--kv-blocks must be >= 0 (got {})", paging.blocks);
    block_size_ = B;
    while ((1 << block_shift_) < B) ++block_shift_;
    const int64_t per_seq = (int64_t(ctx) + B - 1) / B;
    const int64_t scratch = (scratch_slots + B - 1) / B;
    FUTR_CHECK(paging.memory_fraction >= 0 && paging.memory_fraction <= 1,
               "--gpu-memory-fraction {} is not in (0, 1]", paging.memory_fraction);
    if (paging.blocks > 0) {
      blocks_ = paging.blocks;
    } else if (paging.memory_fraction > 0) {
      const double budget = paging.memory_fraction * double(total_b) - double(total_b - free_b) -
                            double(weights_est) - double(reserve);
      blocks_ = int64_t(budget / double(per_slot * size_t(B))) - scratch;
      FUTR_CHECK(
          blocks_ >= per_seq,
          "GPU engine: --gpu-memory-fraction {}: {:.1f} GiB of {:.1f} GiB leave room for {} KV blocks of "
          "{} positions after the weights ({:.1f} GiB), fewer than one sequence of ctx {} needs ({}); "
          "a larger fraction or a smaller --ctx",
          paging.memory_fraction, paging.memory_fraction * double(total_b) / (1ull << 30),
          double(total_b) / (1ull << 30), std::max<int64_t>(0, blocks_), B,
          double(weights_est) / (1ull << 30), ctx, per_seq);
      blocks_ =
          std::min<int64_t>(blocks_, std::min<int64_t>(int64_t(1) << 24, ((int64_t(1) << 30) / B) - scratch));
    } else {
      blocks_ = int64_t(max_seqs) * per_seq;
    }
    FUTR_CHECK((blocks_ + scratch) * B <= (int64_t(1) << 30) && blocks_ <= (int64_t(1) << 24),
               "GPU engine: {} KV blocks of {} positions are more than the cache addresses (2^30 slots, "
               "2^24 blocks); what fits: fewer --kv-blocks",
               blocks_, B);
    scratch_base_ = int(blocks_ * B);
    num_slots_ = int((blocks_ + scratch) * B);
    bytes_ = per_slot * size_t(num_slots_);
    if (bytes_ + weights_est + reserve > free_b) {
      const long fit = long(room / (per_slot * size_t(B))) - long(scratch);
      fail(
          "GPU engine: the paged KV cache of {} blocks of {} positions needs {:.1f} GiB, but {:.1f} GiB of "
          "GPU memory are free after the weights ({:.1f} GiB); what fits: --kv-blocks {} ({} positions)",
          blocks_, B, double(bytes_) / (1ull << 30), double(free_b) / (1ull << 30),
          double(weights_est) / (1ull << 30), std::max(0L, fit), std::max(0L, fit) * B);
    }
  } else {
    slots_per_seq_ = (ctx + layout::kKvSlotAlign - 1) / layout::kKvSlotAlign * layout::kKvSlotAlign;
    const int64_t seq_slots = int64_t(slots_per_seq_) * max_seqs;
    FUTR_CHECK(seq_slots + scratch_slots <= (int64_t(1) << 30),
               "GPU engine: {} sequences x ctx {} = {} KV slots, more "
               "than the cache addresses (2^30); what fits: fewer sequences or a smaller --ctx",
               max_seqs, ctx, seq_slots);
    // The padding rows' scratch region (engine.h): scratch_slots slots past every sequence's.
    scratch_base_ = int(seq_slots);
    num_slots_ = int(seq_slots) + scratch_slots;
    bytes_ = per_slot * size_t(num_slots_);
    if (bytes_ + weights_est + reserve > free_b) {
      const long fit_seqs = long(room / (per_slot * size_t(slots_per_seq_)));
      const long fit_ctx = long(room / (per_slot * size_t(max_seqs))) / 16 * 16;
      fail(
          "GPU engine: the KV cache for {} sequences x ctx {} needs {:.1f} GiB, but {:.1f} GiB of GPU memory "
          "are "
          "free after the weights ({:.1f} GiB); what fits: {} sequences at ctx {}, or ctx {} for {} "
          "sequences",
          max_seqs, ctx, double(bytes_) / (1ull << 30), double(free_b) / (1ull << 30),
          double(weights_est) / (1ull << 30), fit_seqs, ctx, fit_ctx, max_seqs);
    }
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

void KvCache::copy_block(int src, int dst, cudaStream_t st) const {
  FUTR_ASSERT(paged() && src >= 0 && dst >= 0 && src < scratch_block() && dst < scratch_block());
  const size_t B = size_t(block_size_), KVH = size_t(kv_heads_), D = size_t(head_dim_);
  const size_t s0 = size_t(src) * B, d0 = size_t(dst) * B;
  auto copy = [&](void* base, size_t offset_dst, size_t offset_src, size_t bytes) {
    char* p = static_cast<char*>(base);
    FUTR_CUDA_CHECK(cudaMemcpyAsync(p + offset_dst, p + offset_src, bytes, cudaMemcpyDeviceToDevice, st));
  };
  for (const Layer& L : layers_) {
    const size_t row = KVH * D * 2;  // one slot of BF16 K (or V)
    copy(L.k.get(), d0 * row, s0 * row, B * row);
    copy(L.v.get(), d0 * row, s0 * row, B * row);
    if (!mirror_) continue;
    // Nibbles: K in groups of 8 slots (fragment order), V per slot; both D / 2 bytes per slot and head.
    const size_t nib = KVH * D / 2;
    copy(L.k4.get(), d0 * nib, s0 * nib, B * nib);
    copy(L.v4.get(), d0 * nib, s0 * nib, B * nib);
    // Scales [kv_heads][num_slots]: B floats per head.
    const size_t pitch = size_t(num_slots_) * sizeof(float);
    for (float* s : {L.ks.get(), L.vs.get()})
      FUTR_CUDA_CHECK(cudaMemcpy2DAsync(s + d0, pitch, s + s0, pitch, B * sizeof(float), KVH,
                                        cudaMemcpyDeviceToDevice, st));
  }
}

layout::KvLayerPtrs KvCache::layer(int l) const {
  const Layer& L = layers_[size_t(l)];
  return {L.k.get(), L.v.get(), L.k4.get(), L.v4.get(), L.ks.get(), L.vs.get(), num_slots_};
}

}  // namespace futr::gpu
