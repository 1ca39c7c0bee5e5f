// The FP32 KV storage and the KvCache bookkeeping (cpu_engine/kv_cache.h).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "cpu_engine/kv_cache.h"

namespace futr::cpu {
namespace {

ModelConfig config() {
  ModelConfig c;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  return c;
}

TEST(CpuKvCache, WriteThenReadHeadMajor) {
  Fp32KvStorage s(config(), 6);
  EXPECT_EQ(s.capacity(), 6);
  EXPECT_EQ(s.bytes(), 2 * 3 * 2 * 6 * 4 * 4);
  // Two tokens at positions 2, 3 of layer 1: rows [2, kv_dim = 8], value = 100*pos + col.
  std::vector<float> k(16), v(16);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 8; ++j) {
      k[size_t(i * 8 + j)] = float(100 * (2 + i) + j);
      v[size_t(i * 8 + j)] = -float(100 * (2 + i) + j);
    }
  s.write(1, 2, 2, k.data(), v.data());
  const KvLayerView view = s.read(1, 4);
  ASSERT_EQ(view.heads.size(), 2u);
  EXPECT_EQ(view.len, 4);
  for (int h = 0; h < 2; ++h)
    for (int p = 2; p < 4; ++p)
      for (int d = 0; d < 4; ++d) {
        const auto& hv = view.heads[size_t(h)];
        EXPECT_EQ(hv.k[p * hv.ld + d], float(100 * p + h * 4 + d));
        EXPECT_EQ(hv.v[p * hv.ld + d], -float(100 * p + h * 4 + d));
      }
  // Other layers untouched.
  const KvLayerView other = s.read(0, 4);
  EXPECT_EQ(other.heads[0].k[2 * 4], 0.0f);
}

TEST(CpuKvCache, CapacityErrors) {
  KvCache c(make_fp32_kv_storage(config(), 5));
  EXPECT_EQ(c.length(), 0);
  c.advance(3);
  EXPECT_NO_THROW(c.check_room(2));
  EXPECT_THROW(c.check_room(3), Error);
  EXPECT_THROW(c.advance(3), Error);
  EXPECT_EQ(c.length(), 3);
  c.truncate(1);
  EXPECT_EQ(c.length(), 1);
  EXPECT_THROW(c.truncate(2), Error);
  c.clear();
  EXPECT_EQ(c.length(), 0);
  EXPECT_THROW(make_fp32_kv_storage(config(), 0), Error);
  ModelConfig big = config();
  big.n_layers = 1000;
  big.n_kv_heads = 64;
  big.head_dim = 128;
  EXPECT_THROW(make_fp32_kv_storage(big, 1 << 20), Error);  // 64 TB: refused before allocating
}

}  // namespace
}  // namespace futr::cpu
