// The fp32 wire copy of 16-bit gradients (zero/wire_cast_cuda.h).
//
// Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#ifdef STRATUM_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "stratum/zero/wire_cast_cuda.h"

using namespace stratum;
#endif

// The fp32 wire copy of 16-bit gradients equals ATen's conversion: aligned
// and unaligned starts, lengths around the 8-element pack, and an empty one.
TEST(Zero3, WireWideningMatchesAtenOnAGpu) {
#ifdef STRATUM_WITH_CUDA_KERNELS
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const at::Tensor all = torch::randn({100'013}, torch::TensorOptions().device(torch::kCUDA)).to(dtype);
    for (const int64_t offset : {0, 3})
      for (const int64_t n : {0, 1, 7, 8, 9, 100'000}) {
        const at::Tensor src = all.narrow(0, offset, n);
        at::Tensor dst = torch::full({n}, -1.f, torch::TensorOptions().device(torch::kCUDA));
        ASSERT_EQ(zero::cuda::launch_widen_to_float(src.const_data_ptr(),
                                                    dtype == torch::kBFloat16 ? zero::cuda::Dtype::bf16
                                                                              : zero::cuda::Dtype::f16,
                                                    dst.data_ptr<float>(), n,
                                                    c10::cuda::getCurrentCUDAStream().stream()),
                  cudaSuccess);
        EXPECT_TRUE(torch::equal(dst, src.to(torch::kFloat))) << dtype << " offset " << offset << " n " << n;
      }
  }
#else
  GTEST_SKIP() << "built without the CUDA kernels";
#endif
}
