// EXPECT_FUTR_ERROR(stmt, "substring"): checks that stmt throws futr::Error
// whose message contains the substring (every suite that tests clear errors:
// readers, quantizers, file formats, CLI helpers).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

#define EXPECT_FUTR_ERROR(stmt, substr)                                        \
  do {                                                                         \
    try {                                                                      \
      stmt;                                                                    \
      ADD_FAILURE() << "no futr::Error from: " #stmt;                          \
    } catch (const ::futr::Error& e) {                                         \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos)         \
          << "message: " << e.what() << "\nexpected to contain: " << (substr); \
    }                                                                          \
  } while (0)
