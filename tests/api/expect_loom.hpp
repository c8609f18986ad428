// GoogleTest checks of a Loom call: the call must return loomSuccess, and a failure shows the call
// and Loom's last error message. Shared by every test that calls the C API.
#pragma once

#include <gtest/gtest.h>

#include "loom/loom.h"

#define EXPECT_LOOM(call) \
  EXPECT_EQ((call), loomSuccess) << #call << ": " << loomGetLastError(nullptr)
#define ASSERT_LOOM(call) \
  ASSERT_EQ((call), loomSuccess) << #call << ": " << loomGetLastError(nullptr)
