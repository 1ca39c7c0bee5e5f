// Device discovery: without a GPU the probe reports a reason (and GPU tests
// skip with it); with one it reports a Hopper device and a kernel runs.
#include <gtest/gtest.h>

#include "launch/buffer.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "support/gpu.h"

TEST(DeviceProbe, ReasonIffNoDevice) {
  std::string why;
  const auto d = futr::cuda::probe_device(&why);
  if (d) {
    EXPECT_TRUE(why.empty());
    EXPECT_EQ(d->cc_major, 9);
    EXPECT_GT(d->sm_count, 0);
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(futr::cuda::require_device(), futr::Error);
  }
}

TEST(DeviceProbe, FillKernelRuns) {
  FUTR_REQUIRE_GPU();
  futr::cuda::DeviceBuffer<float> b(1 << 20);
  futr::cuda::fill_random(b.get(), futr::cuda::FillType::kF32, b.size(), 7, -1, 1, nullptr);
  const auto h = b.download();
  double sum = 0;
  for (float v : h) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    sum += v;
  }
  EXPECT_LT(std::abs(sum / double(h.size())), 0.01);
}
