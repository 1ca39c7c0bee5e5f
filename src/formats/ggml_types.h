// ggml tensor types as stored in GGUF files: the size table of every type id
// known to the GGUF format, and the block decoders for the types FuTransformer
// dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
//
// Block layouts (little-endian; written from the format definition):
//   F32   4 bytes per value; F16, BF16 2 bytes per value.
//   Q8_0  32 values in 34 bytes: fp16 d, int8 q[32];             x[j] = q[j] * d
//   Q4_0  32 values in 18 bytes: fp16 d, uint8 qs[16];           x[j] = (lo(qs[j]) - 8) * d,
//                                                                x[j+16] = (hi(qs[j]) - 8) * d
//   Q4_1  32 values in 20 bytes: fp16 d, fp16 m, uint8 qs[16];   x[j] = lo(qs[j]) * d + m,
//                                                                x[j+16] = hi(qs[j]) * d + m
// where lo(b) = b & 15 and hi(b) = b >> 4: the low nibbles hold elements 0..15
// of the block and the high nibbles elements 16..31. Blocks run along ne[0]
// (the innermost GGUF dimension, i.e. along a row of the canonical [out, in]
// weight), so a row is a whole number of blocks.
//
// Tested by tests/formats/ggml_types_test.cpp (hand-made blocks with known
// values) and against the Python `gguf` package once (docs/FORMATS.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace futr {

struct GgmlTypeInfo {
  uint32_t id;          // the type id stored in a GGUF tensor info
  const char* name;     // "Q4_1", ...
  uint32_t block;       // values per block
  uint32_t block_bytes; // bytes per block
  bool supported;       // dequantize_ggml() can decode it
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
