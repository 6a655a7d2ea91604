// Where each rank trains and how its device tensors travel (plan_devices,
// the rule distributed::init applies): one GPU a rank over NCCL, GPUs shared
// round-robin over MPI when ranks outnumber them, the CPU when told so.
#include <gtest/gtest.h>

#include <string>

#include "stratum/distributed/init.h"

using namespace stratum;
using namespace stratum::distributed;

TEST(DeviceAssignment, NoGpuMeansCpuRanksSilently) {
  for (int ranks : {1, 4}) {
    const DevicePlan plan = plan_devices(ranks - 1, ranks, /*gpus=*/0, false, false);
    EXPECT_EQ(plan.cuda_device, -1);
    EXPECT_EQ(plan.comm, DeviceComm::none);
    EXPECT_EQ(plan.message, "");
  }
}

TEST(DeviceAssignment, OneGpuARankIsNccl) {
  for (int local_rank = 0; local_rank < 4; ++local_rank) {
    const DevicePlan plan = plan_devices(local_rank, 4, /*gpus=*/8, false, false);
    EXPECT_EQ(plan.cuda_device, local_rank);
    EXPECT_EQ(plan.comm, DeviceComm::nccl);
    EXPECT_EQ(plan.message, "");
  }
  EXPECT_EQ(plan_devices(0, 1, 1, false, false).comm, DeviceComm::nccl);
  EXPECT_EQ(plan_devices(1, 2, 2, false, false).cuda_device, 1);
}

TEST(DeviceAssignment, MoreRanksThanGpusShareThemRoundRobin) {
  // 4 ranks on 1 GPU: all on GPU 0.
  for (int local_rank = 0; local_rank < 4; ++local_rank) {
    const DevicePlan plan = plan_devices(local_rank, 4, 1, false, false);
    EXPECT_EQ(plan.cuda_device, 0);
    EXPECT_EQ(plan.comm, DeviceComm::mpi_staged);
  }
  // 6 ranks on 4 GPUs: 0 1 2 3 0 1.
  const int want[] = {0, 1, 2, 3, 0, 1};
  for (int local_rank = 0; local_rank < 6; ++local_rank)
    EXPECT_EQ(plan_devices(local_rank, 6, 4, false, false).cuda_device, want[local_rank]) << "local rank " << local_rank;
  const std::string message = plan_devices(0, 4, 1, false, false).message;
  EXPECT_NE(message.find("4 ranks share 1 GPU on this node"), std::string::npos) << message;
  EXPECT_NE(message.find("over MPI staged through host memory"), std::string::npos) << message;
  EXPECT_NE(message.find("STRATUM_SHARED_GPU=0"), std::string::npos) << message;
  EXPECT_NE(plan_devices(0, 3, 2, false, false).message.find("3 ranks share 2 GPUs"), std::string::npos);
}

TEST(DeviceAssignment, SharedGpuSwitchedOffKeepsCpuRanks) {
  const DevicePlan plan = plan_devices(1, 4, 1, false, /*shared_disabled=*/true);
  EXPECT_EQ(plan.cuda_device, -1);
  EXPECT_EQ(plan.comm, DeviceComm::none);
  EXPECT_NE(plan.message.find("4 ranks on this node but 1 GPU"), std::string::npos) << plan.message;
  // The switch only matters when ranks outnumber GPUs.
  EXPECT_EQ(plan_devices(0, 2, 2, false, true).comm, DeviceComm::nccl);
}

TEST(DeviceAssignment, NcclDisabledMeansCpuRanksOnly) {
  for (int ranks : {1, 4}) {
    const DevicePlan plan = plan_devices(0, ranks, 1, /*nccl_disabled=*/true, false);
    EXPECT_EQ(plan.cuda_device, -1);
    EXPECT_EQ(plan.comm, DeviceComm::none);
    EXPECT_EQ(plan.message, "");
  }
}

TEST(DeviceAssignment, ALocalRankOutsideTheNodeIsAnError) {
  try {
    plan_devices(4, 4, 1, false, false);
    ADD_FAILURE() << "accepted local rank 4 of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local rank 4 is not one of this node's 4 ranks"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plan_devices(-1, 2, 2, false, false), Error);
  // Without a GPU to pick, nothing to check.
  EXPECT_EQ(plan_devices(4, 4, 0, false, false).comm, DeviceComm::none);
}

TEST(DeviceAssignment, ContextDeviceFollowsTheGpu) {
  DistContext ctx;
  EXPECT_FALSE(ctx.on_gpu());
  EXPECT_TRUE(ctx.device().is_cpu());
  ctx.cuda_device = 0;  // a shared GPU: no NCCL world, yet the training device is the GPU
  ctx.device_comm = DeviceComm::mpi_staged;
  EXPECT_TRUE(ctx.on_gpu());
  EXPECT_EQ(ctx.device(), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(ctx.gpu_world, nullptr);
  EXPECT_EQ(std::string(device_comm_name(ctx.device_comm)), "mpi_staged");
}

// Ranks start with expandable segments unless the user configured the CUDA
// allocator themselves, under either of PyTorch's variable names.
TEST(DeviceAssignment, AllocatorGetsExpandableSegmentsUnlessTheUserChose) {
  EXPECT_EQ(default_cuda_allocator_settings(nullptr, nullptr), std::optional<std::string>("expandable_segments:True"));
  EXPECT_EQ(default_cuda_allocator_settings(nullptr, "max_split_size_mb:512"), std::nullopt);
  EXPECT_EQ(default_cuda_allocator_settings("expandable_segments:False", nullptr), std::nullopt);
  EXPECT_EQ(default_cuda_allocator_settings("", nullptr), std::nullopt);  // set, even if empty: the user's
}
