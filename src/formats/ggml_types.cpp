// ggml tensor types: see ggml_types.h for the block layouts.
#include "formats/ggml_types.h"

#include <cstring>

#include "core/error.h"
#include "core/numeric.h"

namespace futr {
namespace {

// Sizes of every type id the GGUF format defines (ids 4, 5 and 31..33 were
// retired and never appear in files), as ggml's block structs have them.
// NOTE: Q8_1 is 36 bytes (fp16 d, fp16 s, int8 q[32]: ggml-common.h asserts
// sizeof(block_q8_1) == 2*sizeof(ggml_half) + QK8_1); the `gguf` Python package
// 0.19.0 still lists the old 40 (two floats). ggml only makes Q8_1 for
// activations, so files do not hold it; it is sized here so a tensor of that
// type is reported as unsupported rather than as a broken file.
constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},          {30, "BF16", 1, 2, true},
    {8, "Q8_0", 32, 34, true},       {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},       {9, "Q8_1", 32, 36, false},
    {10, "Q2_K", 256, 84, true},     {11, "Q3_K", 256, 110, true},    {12, "Q4_K", 256, 144, true},
    {13, "Q5_K", 256, 176, true},    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, true},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},  {18, "IQ3_XXS", 256, 98, false},
    {19, "IQ1_S", 256, 50, false},   {20, "IQ4_NL", 32, 18, false},   {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},
    {25, "I16", 1, 2, false},        {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},   {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},   {39, "MXFP4", 32, 17, false},
};

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float load_f16(const uint8_t* p) { return fp16_to_float(load_u16(p)); }

// The 5-bit legacy blocks: bit j of the little-endian u32 qh is bit 4 of element j.
void q5_block(const uint8_t* qh_bytes, const uint8_t* qs, float d, float m, bool offset, float* y) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = int(qs[j] & 15) | int((qh >> j) & 1) << 4;
    const int hi = int(qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    if (offset) {  // Q5_0: (q - 16) * d
      y[j] = d * float(lo - 16);
      y[j + 16] = d * float(hi - 16);
    } else {  // Q5_1: q * d + m
      y[j] = d * float(lo) + m;
      y[j + 16] = d * float(hi) + m;
    }
  }
}

// Q4_K / Q5_K: the eight 6-bit (scale, min) pairs packed into 12 bytes.
// Sub-block j < 4: scale = s[j] & 63, min = s[j+4] & 63; j >= 4: the low four
// bits from s[j+4] (scale: low nibble, min: high nibble), the top two from the
// spare bits 6..7 of s[j-4] (scale) and s[j] (min).
void k4_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void q2_k_block(const uint8_t* p, float* y) {
  const uint8_t* scales = p;   // [16] low nibble: scale, high nibble: min
  const uint8_t* qs = p + 16;  // [64] four 2-bit values per byte
  const float d = load_f16(p + 80), dmin = load_f16(p + 82);
  // Element i = 128 h + 32 s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32 h + l];
  // its sub-block of 16 is i / 16.
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = i / 32 % 4, l = i % 32;
    const int q = (qs[32 * h + l] >> (2 * s)) & 3;
    const uint8_t sc = scales[i / 16];
    y[i] = (d * float(sc & 15)) * float(q) - dmin * float(sc >> 4);
  }
}

void q3_k_block(const uint8_t* p, float* y) {
  const uint8_t* hmask = p;    // [32] bit b of hmask[l]: high bit of element 32 b + l
  const uint8_t* qs = p + 32;  // [64] low two bits, as Q2_K
  const uint8_t* sc = p + 96;  // [12] sixteen 6-bit scales, offset 32
  const float d = load_f16(p + 108);
  int scale[16];
  // Scale j: low four bits from sc[j % 8] (low nibble for j < 8, high for j >= 8),
  // top two bits from sc[8 + j % 4], bits 2 (j / 4)..2 (j / 4) + 1.
  for (int j = 0; j < 16; ++j) {
    const int lo = (sc[j % 8] >> (4 * (j / 8))) & 15;
    const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    scale[j] = (lo | hi << 4) - 32;
  }
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = i / 32 % 4, l = i % 32;
    const int lo = (qs[32 * h + l] >> (2 * s)) & 3;
    const bool high = (hmask[l] >> (i / 32)) & 1;
    const int q = lo - (high ? 0 : 4);  // NOTE: a set mask bit means no offset
    y[i] = (d * float(scale[i / 16])) * float(q);
  }
}

// Q4_K (five_bit = false) and Q5_K: element i = 64 c + 32 h + l (c < 4, h < 2, l < 32)
// has its low four bits in nibble h of qs[32 c + l]; Q5_K adds bit i / 32 of qh[l]
// as bit 4. Sub-block of 32: i / 32.
void q45_k_block(const uint8_t* p, bool five_bit, float* y) {
  const float d = load_f16(p), dmin = load_f16(p + 2);
  const uint8_t* scales = p + 4;                 // [12]
  const uint8_t* qh = p + 16;                    // [32] (Q5_K only)
  const uint8_t* qs = p + (five_bit ? 48 : 16);  // [128]
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    k4_scale_min(scales, j, sc, mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    for (int k = 0; k < 32; ++k) {
      const int i = 32 * j + k;
      int q = (qs[32 * (j / 2) + k] >> (4 * (j % 2))) & 15;
      if (five_bit) q |= ((qh[k] >> j) & 1) << 4;
      y[i] = dl * float(q) - ml;
    }
  }
}

void q6_k_block(const uint8_t* p, float* y) {
  const uint8_t* ql = p;                                      // [128] low four bits
  const uint8_t* qh = p + 128;                                // [64] high two bits
  const auto* sc = reinterpret_cast<const int8_t*>(p + 192);  // [16] signed scales
  const float d = load_f16(p + 208);
  // Element i = 128 h + 32 s + l (h < 2, s < 4, l < 32): low nibble (s / 2) of
  // ql[64 h + 32 (s % 2) + l], high bits 2s..2s+1 of qh[32 h + l]; q - 32.
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = i / 32 % 4, l = i % 32;
    const int lo = (ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 15;
    const int hi = (qh[32 * h + l] >> (2 * s)) & 3;
    y[i] = (d * float(sc[i / 16])) * float((lo | hi << 4) - 32);
  }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? std::string(t->name) : "type " + std::to_string(id);
}

const char* ggml_supported_types() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K";
}

void dequantize_ggml(const GgmlTypeInfo& info, std::span<const uint8_t> in, std::span<float> out) {
  FUTR_ASSERT(info.supported);
  FUTR_ASSERT(out.size() % info.block == 0);
  const size_t nblocks = out.size() / info.block;
  FUTR_ASSERT(in.size() == nblocks * info.block_bytes);
  const uint8_t* p = in.data();
  float* y = out.data();
  switch (info.id) {
    case 0:  // F32
      std::memcpy(y, p, out.size() * 4);
      return;
    case 1:  // F16
      for (size_t i = 0; i < out.size(); ++i) y[i] = fp16_to_float(load_u16(p + 2 * i));
      return;
    case 30:  // BF16
      for (size_t i = 0; i < out.size(); ++i) y[i] = bf16_to_float(load_u16(p + 2 * i));
      return;
    case 8:  // Q8_0: fp16 d, int8 q[32]
      for (size_t b = 0; b < nblocks; ++b, p += 34, y += 32) {
        const float d = fp16_to_float(load_u16(p));
        for (int j = 0; j < 32; ++j) y[j] = float(int8_t(p[2 + j])) * d;
      }
      return;
    case 2:  // Q4_0: fp16 d, 16 bytes of nibbles, offset 8
      for (size_t b = 0; b < nblocks; ++b, p += 18, y += 32) {
        const float d = fp16_to_float(load_u16(p));
        const uint8_t* qs = p + 2;
        for (int j = 0; j < 16; ++j) {
          y[j] = float(int(qs[j] & 15) - 8) * d;
          y[j + 16] = float(int(qs[j] >> 4) - 8) * d;
        }
      }
      return;
    case 3:  // Q4_1: fp16 d, fp16 m, 16 bytes of nibbles
      for (size_t b = 0; b < nblocks; ++b, p += 20, y += 32) {
        const float d = fp16_to_float(load_u16(p));
        const float m = fp16_to_float(load_u16(p + 2));
        const uint8_t* qs = p + 4;
        for (int j = 0; j < 16; ++j) {
          y[j] = float(qs[j] & 15) * d + m;
          y[j + 16] = float(qs[j] >> 4) * d + m;
        }
      }
      return;
    case 6:  // Q5_0: fp16 d, u32 qh, 16 bytes of nibbles, offset 16
      for (size_t b = 0; b < nblocks; ++b, p += 22, y += 32)
        q5_block(p + 2, p + 6, load_f16(p), 0.0f, true, y);
      return;
    case 7:  // Q5_1: fp16 d, fp16 m, u32 qh, 16 bytes of nibbles
      for (size_t b = 0; b < nblocks; ++b, p += 24, y += 32)
        q5_block(p + 4, p + 8, load_f16(p), load_f16(p + 2), false, y);
      return;
    case 10:  // Q2_K
      for (size_t b = 0; b < nblocks; ++b, p += 84, y += 256) q2_k_block(p, y);
      return;
    case 11:  // Q3_K
      for (size_t b = 0; b < nblocks; ++b, p += 110, y += 256) q3_k_block(p, y);
      return;
    case 12:  // Q4_K
      for (size_t b = 0; b < nblocks; ++b, p += 144, y += 256) q45_k_block(p, false, y);
      return;
    case 13:  // Q5_K
      for (size_t b = 0; b < nblocks; ++b, p += 176, y += 256) q45_k_block(p, true, y);
      return;
    case 14:  // Q6_K
      for (size_t b = 0; b < nblocks; ++b, p += 210, y += 256) q6_k_block(p, y);
      return;
    case 15:  // Q8_K: f32 d, int8 q[256], int16 bsums[16] (sums for dot products; unused)
      for (size_t b = 0; b < nblocks; ++b, p += 292, y += 256) {
        float d;
        std::memcpy(&d, p, 4);
        for (int j = 0; j < 256; ++j) y[j] = d * float(int8_t(p[4 + j]));
      }
      return;
    default: FUTR_ASSERT(false);
  }
}

}  // namespace futr
