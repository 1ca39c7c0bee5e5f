// CPU reference of the decode-step KV-cache kernels (the specification
// src/kernels/sm90_kv_append.cuh and sm90_decode_attention*.cuh are
// tested against), on a host copy of one layer's cache in exactly the device
// layouts (src/kernels/layout/kv_cache.cuh):
//
//   kv_append():         rows -> BF16 primary, and the INT4 mirror through the
//                        CPU quantizer itself (quant::kv_int4_store_row, with
//                        quant::hadamard_rotate for the rotated mirror), so the
//                        kernel's bytes must equal these bytes exactly;
//   decode_attention():  for each sequence b and query head j (KV head j / G):
//                          q' = float(q) (H for the rotated mirror)
//                          s_t = q' . k_t / sqrt(D),  k_t decoded from the
//                          mirror's bytes ((n - 8) * s) or the BF16 primary
//                          out = (sum_t softmax(s)_t v_t) (H for the rotated mirror)
//                        in float64 (out: float, not rounded).
#pragma once

#include <cstdint>
#include <vector>

namespace futr::ref {

struct KvLayerHost {
  int num_slots = 0, kv_heads = 0, head_dim = 0;
  std::vector<uint16_t> k, v;   // [num_slots][kv_heads][D] BF16 bits
  std::vector<uint8_t> k4, v4;  // mirror nibbles (fragment order / channel order)
  std::vector<float> ks, vs;    // [kv_heads][num_slots]
  KvLayerHost(int num_slots, int kv_heads, int head_dim);
};

// k, v: [rows] rows of kv_heads * D BF16 bits with row stride ld.
void kv_append(KvLayerHost& c, const uint16_t* k, const uint16_t* v, int64_t ld, int rows, const int* row_seq,
               const int* row_pos, const int* slot_base, bool mirror, int rot_block);

// q: [batch][kv_heads * group][D] BF16 bits; out: [batch][kv_heads * group][D].
void decode_attention(const KvLayerHost& c, const uint16_t* q, int batch, int group, const int* slot_base,
                      const int* kv_len, bool int4, int rot_block, float* out);

}  // namespace futr::ref
