// The host buffers of asynchronous saves: carved from the reserved block
// while it lasts, allocated beyond it, reused by the next save in the same
// order, each holding its source's values.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "../common/error_of.h"
#include "stratum/checkpoint/host_staging.h"

using namespace stratum;

TEST(HostStaging, CarvesTheReservedBlockThenAllocatesAndReusesInOrder) {
  HostStaging staging;
  staging.reserve(1024, /*pinned=*/false);
  const at::Tensor a = at::randn({10, 10});           // 400 bytes: the block's [0, 400)
  const at::Tensor b = at::arange(50, at::kLong);     // 400 bytes: from 512 (256-byte aligned)
  const at::Tensor c = at::randn({100});              // 400 bytes: past the block's end, allocated
  const at::Tensor ca = staging.copy(a), cb = staging.copy(b), cc = staging.copy(c);
  EXPECT_TRUE(ca.equal(a));
  EXPECT_TRUE(cb.equal(b));
  EXPECT_TRUE(cc.equal(c));
  EXPECT_EQ(ca.sizes(), a.sizes());
  EXPECT_EQ(cb.scalar_type(), at::kLong);
  EXPECT_EQ(reinterpret_cast<const char*>(cb.data_ptr()) - reinterpret_cast<const char*>(ca.data_ptr()), 512);
  EXPECT_EQ(staging.bytes(), 1024u + 400u);
  // The next save: the same buffers, new values.
  staging.rewind();
  const at::Tensor a2 = at::randn({10, 10});
  const at::Tensor again = staging.copy(a2);
  EXPECT_EQ(again.data_ptr(), ca.data_ptr());
  EXPECT_TRUE(again.equal(a2));
  EXPECT_EQ(staging.bytes(), 1024u + 400u);
  EXPECT_NE(test::error_of([&] { staging.reserve(10, false); }).find("once, before the first copy"), std::string::npos);
}
