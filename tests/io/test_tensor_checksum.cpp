// io::tensor_crc32c, chunked over torch's threads, equals the CRC-32C of the
// bytes in one pass, for every size around its chunking and for views.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "stratum/core/crc32c.h"
#include "stratum/io/tensor_checksum.h"

namespace {

TEST(TensorChecksum, EqualsTheSerialCrcAtEverySize) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{4} << 20, (int64_t{4} << 20) + 3, int64_t{11} << 20}) {
    at::Tensor t = at::randn({n});
    EXPECT_EQ(stratum::io::tensor_crc32c(t), stratum::crc32c(t.data_ptr(), t.nbytes())) << n;
  }
  at::Tensor m = at::randn({64, 33});
  at::Tensor view = m.t();  // not contiguous: checksummed as its contiguous bytes
  const at::Tensor c = view.contiguous();
  EXPECT_EQ(stratum::io::tensor_crc32c(view), stratum::crc32c(c.data_ptr(), c.nbytes()));
}

}  // namespace
