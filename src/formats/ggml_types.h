// ggml tensor types as stored in GGUF files: the size table of every type id
// known to the GGUF format, and the block decoders for the types FuTransformer
// dequantizes on load: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
// K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (the "Q4_K_M"-style files people
// download mix these). The rest (IQ*, TQ*, MXFP4, Q8_1, integer types) are
// sized, so the parser can step over them, and refused by name on load.
//
// Block layouts (little-endian; written from ggml's block structs; lo(b) = b & 15,
// hi(b) = b >> 4, fp16 = IEEE half):
//   F32   4 bytes per value; F16, BF16 2 bytes per value.
//   Q8_0  32 values in 34 bytes: fp16 d, int8 q[32];             x[j] = q[j] * d
//   Q4_0  32 values in 18 bytes: fp16 d, uint8 qs[16];           x[j] = (lo(qs[j]) - 8) * d,
//                                                                x[j+16] = (hi(qs[j]) - 8) * d
//   Q4_1  32 values in 20 bytes: fp16 d, fp16 m, uint8 qs[16];   x[j] = lo(qs[j]) * d + m,
//                                                                x[j+16] = hi(qs[j]) * d + m
//   Q5_0  32 values in 22 bytes: fp16 d, u32 qh, uint8 qs[16]:   as Q4_0 with bit j of qh as
//                                                                bit 4 of element j; offset 16
//   Q5_1  32 values in 24 bytes: fp16 d, fp16 m, u32 qh, qs[16]: as Q4_1 with qh as in Q5_0
// The K-quants: super-blocks of 256 values in sub-blocks of 16 or 32, each with
// a small integer scale (and min) multiplied by the fp16 super-block d (dmin):
//   Q2_K  84 bytes: scales[16] (lo: scale, hi: min of each 16), qs[64] (2 bits), d, dmin;
//                   x = d * sc * q - dmin * m
//   Q3_K 110 bytes: hmask[32], qs[64] (low 2 bits), scales[12] (sixteen 6-bit, - 32), d;
//                   x = d * sc * (q - 4 * !hbit)
//   Q4_K 144 bytes: d, dmin, scales[12] (eight 6-bit scale/min pairs), qs[128] (4 bits);
//                   x = d * sc * q - dmin * m per sub-block of 32
//   Q5_K 176 bytes: d, dmin, scales[12], qh[32] (bit 4), qs[128]; as Q4_K
//   Q6_K 210 bytes: ql[128] (low 4 bits), qh[64] (high 2), int8 scales[16], d;
//                   x = d * sc * (q - 32) per sub-block of 16
//   Q8_K 292 bytes: f32 d, int8 q[256], int16 bsums[16] (unused here); x = d * q
// The element order inside each block is spelled out beside its decoder in
// ggml_types.cpp. Blocks run along ne[0] (the innermost GGUF dimension, i.e.
// along a row of the canonical [out, in] weight), so a row is a whole number of
// blocks. Products are formed in the order ggml's reference (and the `gguf`
// Python package) forms them, so the results are bit-identical to theirs.
//
// Tested by tests/formats/ggml_types_test.cpp (hand-made blocks with known
// values) and tests/formats/ggml_crosscheck_test.cpp (random blocks and a file
// written by the Python `gguf` package, bit for bit against its dequantization).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace futr {

struct GgmlTypeInfo {
  uint32_t id;           // the type id stored in a GGUF tensor info
  const char* name;      // "Q4_1", ...
  uint32_t block;        // values per block
  uint32_t block_bytes;  // bytes per block
  bool supported;        // dequantize_ggml() can decode it
};

// The entry for type id `id`, or nullptr if the id is unknown.
const GgmlTypeInfo* ggml_type_info(uint32_t id);

// "Q4_1", or "type 99" for an unknown id.
std::string ggml_type_name(uint32_t id);

// The names of the dequantizable types, for error messages: "F32, F16, ...".
const char* ggml_supported_types();

// Decodes `out.size()` values (a multiple of the type's block size) of type
// `info` from `in` (exactly out.size() / block * block_bytes bytes) into FP32.
// Precondition (checked by FUTR_ASSERT): info->supported and sizes match.
void dequantize_ggml(const GgmlTypeInfo& info, std::span<const uint8_t> in, std::span<float> out);

}  // namespace futr
