// GPU test support: FUTR_REQUIRE_GPU() skips the current test, with the reason,
// when no usable Hopper GPU is present (no driver on CI, another architecture).
#pragma once

#include <gtest/gtest.h>

#include "launch/device.h"

#define FUTR_REQUIRE_GPU()                                                            \
  do {                                                                                \
    if (!::futr::cuda::probe_device())                                                \
      GTEST_SKIP() << "GPU test skipped: " << ::futr::cuda::gpu_unavailable_reason(); \
  } while (0)

// The H200's multiprocessor count, for the tests that pin what a heuristic
// chooses on that device without one (a run on a GPU always queries
// DeviceInfo::sm_count; nothing in src/ names an SM count).
inline constexpr int kH200SmCount = 132;
