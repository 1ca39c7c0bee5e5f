// The GPU engine's KV cache: per layer a BF16 primary cache and, with the
// int4 / int4-rot formats, the INT4 mirror (kernels/layout/kv_cache.cuh,
// docs/LAYOUTS.md), shared by the decode step and the prefill path; and the
// RoPE tables of the positions it holds.
//
// Slots, contiguous (block_size 0): one region of slots_per_seq =
// round_up(ctx, 16) slots per sequence slot (sequence slot s owns
// [s * slots_per_seq, (s + 1) * slots_per_seq)), then a scratch region of
// `scratch_slots` slots (the decode step's padding rows, engine.h: dummy row j
// writes and reads only slot scratch_base + j):
//   num_slots = max_seqs x slots_per_seq + scratch_slots   (a multiple of 16)
// Paged (block_size B > 0, docs/LAYOUTS.md "Paged KV cache"): `blocks` blocks
// of B slots shared by every sequence (block b = slots [b * B, (b + 1) * B),
// handed out by the engine's runtime::BlockPool), then the scratch region as
// scratch_blocks() whole blocks, so that a padding row's block table can
// point into it:
//   num_slots = (blocks + scratch_blocks) x B,  scratch_base = blocks x B
// Every buffer is zeroed at construction (the mirror's nibbles 8: zeros).
// The RoPE tables cover max(ctx, scratch_slots) positions (the padding rows'
// positions are their indices).
//
// The fit refusal: before allocating, the cache's bytes plus the weights'
// estimate plus 1 GiB of room (activations, workspaces, cuBLASLt, the CUDA
// context) are checked against the free GPU memory; a cache that does not fit
// is refused with a futr::Error naming what would fit (fewer sequences or a
// shorter context).
//
// Tests: tests/gpu_engine/engine_test.cpp (the cache through the engine),
// tests/gpu_engine/prefill_test.cpp (the mirror the prefill writes against the
// decode append's bytes, through GpuEngine::dump_kv_layer).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/number_formats.h"
#include "kernels/layout/kv_cache.cuh"
#include "launch/buffer.h"
#include "model/model.h"

namespace futr::gpu {

// How the slots are cut (block_size 0: a region per sequence).
struct KvPaging {
  int block_size = 0;  // B, a power of two in 16..128 (the prefill attention's TMA box), or 0
  int64_t blocks = 0;  // blocks for the sequences; 0: by memory_fraction, else max_seqs x ceil(ctx / B)
  // blocks 0: the blocks that fill this share of the GPU's total memory,
  // counting what is in use now, the weights still to come and 1 GiB of room (0: unused).
  double memory_fraction = 0;
};

class KvCache {
 public:
  struct Layer {
    cuda::DeviceBuffer<uint16_t> k, v;  // [num_slots][kv_heads][D] BF16 (K after RoPE)
    // The INT4 mirror (int4, int4-rot; else empty), docs/LAYOUTS.md:
    cuda::DeviceBuffer<uint8_t> k4;    // [num_slots / 8][kv_heads][32 lanes][D / 8] nibbles, fragment order
    cuda::DeviceBuffer<uint8_t> v4;    // [num_slots][kv_heads][D / 2] nibbles, channel order
    cuda::DeviceBuffer<float> ks, vs;  // [kv_heads][num_slots] FP32 scales (amax / 7), head-major
  };

  // kv: bf16 | int4 | int4-rot; rot_block: the Hadamard block (int4-rot);
  // weights_bytes: the estimate of the weights still to be uploaded (the fit check).
  KvCache(const ModelConfig& c, KvFormat kv, int rot_block, int ctx, int max_seqs, int scratch_slots,
          size_t weights_bytes, const KvPaging& paging = {});
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  layout::KvLayerPtrs layer(int l) const;  // the kernels' view of layer l
  const Layer& buffers(int l) const { return layers_[size_t(l)]; }
  int n_layers() const { return int(layers_.size()); }

  bool mirror() const { return mirror_; }       // the INT4 mirror is written (int4, int4-rot)
  int rot_block() const { return rot_block_; }  // its Hadamard block (0: not rotated)
  int num_slots() const { return num_slots_; }
  int scratch_base() const { return scratch_base_; }  // the first slot of the scratch region
  // Contiguous: a sequence slot's region.
  int slots_per_seq() const { return slots_per_seq_; }  // 0 when paged
  int slot_base(int seq_slot) const { return seq_slot * slots_per_seq_; }
  // Paged: blocks of block_size() slots (0: not paged).
  bool paged() const { return block_size_ > 0; }
  int block_size() const { return block_size_; }
  int block_shift() const { return block_shift_; }  // log2(block_size)
  int64_t blocks() const { return blocks_; }        // the sequences' blocks
  int scratch_blocks() const { return paged() ? (num_slots_ - scratch_base_) / block_size_ : 0; }
  int scratch_block() const { return paged() ? scratch_base_ / block_size_ : 0; }  // its first block
  // Copy-on-write: slots of block src into block dst (whole blocks), every
  // layer and form (BF16, nibbles, scales), asynchronously on st.
  void copy_block(int src, int dst, cudaStream_t st) const;
  size_t bytes() const { return bytes_; }
  const float* rope_cos() const { return rope_cos_.get(); }  // [max(ctx, scratch_slots)][D/2]
  const float* rope_sin() const { return rope_sin_.get(); }

 private:
  std::vector<Layer> layers_;  // [layers]
  bool mirror_ = false;
  int rot_block_ = 0;
  int num_slots_ = 0, slots_per_seq_ = 0, scratch_base_ = 0;
  int block_size_ = 0, block_shift_ = 0;
  int64_t blocks_ = 0;
  int kv_heads_ = 0, head_dim_ = 0;
  size_t bytes_ = 0;
  cuda::DeviceBuffer<float> rope_cos_, rope_sin_;  // [max(ctx, scratch_slots)][D/2] FP32
};

}  // namespace futr::gpu
