// ggml tensor types: see ggml_types.h for the block layouts.
#include "formats/ggml_types.h"

#include <cstring>

#include "core/error.h"
#include "core/numeric.h"

namespace futr {
namespace {

// Sizes of every type id the GGUF format defines (ids 4, 5 and 31..33 were
// retired and never appear in files). Only the first group is decoded.
constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4, true},        {1, "F16", 1, 2, true},        {30, "BF16", 1, 2, true},
    {8, "Q8_0", 32, 34, true},     {2, "Q4_0", 32, 18, true},     {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, false},    {7, "Q5_1", 32, 24, false},    {9, "Q8_1", 32, 40, false},
    {10, "Q2_K", 256, 84, false},  {11, "Q3_K", 256, 110, false}, {12, "Q4_K", 256, 144, false},
    {13, "Q5_K", 256, 176, false}, {14, "Q6_K", 256, 210, false}, {15, "Q8_K", 256, 292, false},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
    {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, false},   {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, false},
    {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},
    {34, "TQ1_0", 256, 54, false},   {35, "TQ2_0", 256, 66, false},
    {39, "MXFP4", 32, 17, false},
};

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
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

const char* ggml_supported_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_1"; }

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
    default:
      FUTR_ASSERT(false);
  }
}

}  // namespace futr
