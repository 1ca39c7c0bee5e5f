// CPU reference of the prefill attention (the specification
// src/kernels/sm90_prefill_attention.cuh is tested against), on a host
// copy of one layer's BF16 cache in the device layout (ref::KvLayerHost,
// src/kernels/layout/kv_cache.cuh):
//
//   for request r, new row i at position p = pos0[r] + i, query head j (KV
//   head j / G), keys t = 0..p at slots slot_base[r] + t:
//     s_t = q . k_t / sqrt(D);  out = sum_t softmax(s)_t v_t
//   in float64 over exactly the BF16 values (out: float, not rounded). The
//   causal GQA rule is cpu::causal_attention's (src/cpu_engine/ops.h), here over
//   packed requests with prefixes.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/decode_attention_ref.h"  // KvLayerHost

namespace futr::ref {

struct PrefillRequestHost {
  int row_begin = 0, n_rows = 0, pos0 = 0, slot_base = 0;
};

// q: [rows][n_heads * D] BF16 bits (row stride q_ld); out: [rows][n_heads * D]
// float (row stride out_ld); n_heads = kv_heads * group.
void prefill_attention(const KvLayerHost& c, const uint16_t* q, int64_t q_ld, int group,
                       const std::vector<PrefillRequestHost>& reqs, float* out, int64_t out_ld);

}  // namespace futr::ref
