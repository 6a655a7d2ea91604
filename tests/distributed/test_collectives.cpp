// Every collective x dtype, on whatever world size mpirun gives (CTest runs
// this at 1, 2, 3 and 4 ranks), over MPI (CPU) and, on GPU machines, NCCL
// and MPI carrying the GPU's tensors (staged through host memory, as when
// ranks share a GPU).
// Values are small integers so that sums are exact even in bf16; the 16-bit
// rounding test checks that a sum is rounded once, as fp32 then bf16.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#ifdef STRATUM_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "distributed_test_context.h"
#include "stratum/distributed/parallel_groups.h"

using namespace stratum;
using namespace stratum::distributed;

namespace {

// The shared backends, and MPI with this rank's GPU's tensors wherever it has one.
std::vector<stratum::test::Backend> backends() {
  std::vector<stratum::test::Backend> out = stratum::test::backends();
  const DistContext& ctx = stratum::test::context();
  if (ctx.on_gpu()) out.push_back({"mpi-cuda", ctx.cpu_world, ctx.device()});
  return out;
}

const std::vector<at::ScalarType> kFloatTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf};

// Element i of rank r's input: small, distinct per rank and position.
at::Tensor rank_values(int64_t n, int rank, at::ScalarType dtype, c10::Device device) {
  return (at::arange(n, at::kDouble).remainder(5) + (rank + 1)).to(dtype).to(device);
}

void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::equal(got.cpu().to(at::kDouble), want.cpu().to(at::kDouble)))
      << what << "\n got: " << got.cpu().to(at::kDouble).slice(0, 0, 8) << "\nwant: "
      << want.cpu().to(at::kDouble).slice(0, 0, 8);
}

}  // namespace

TEST(Collectives, AllReduceEveryOpAndDtype) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : kFloatTypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
        for (int64_t numel : {1, 7, 1000, 65537}) {
          at::Tensor t = rank_values(numel, r, dtype, b.device);
          b.world->all_reduce(t, op)->wait();
          at::Tensor base = at::arange(numel, at::kDouble).remainder(5);
          at::Tensor want = op == ReduceOp::sum   ? base * n + n * (n + 1) / 2
                            : op == ReduceOp::avg ? base + (n + 1) / 2.0
                            : op == ReduceOp::max ? base + n
                                                  : base + 1;
          // avg of bf16/fp16 is rounded to the dtype once.
          want = want.to(dtype).to(at::kDouble);
          expect_equal(t, want, b.name + " all_reduce " + reduce_op_name(op) + " " + c10::toString(dtype) +
                                    " numel " + std::to_string(numel));
        }
      }
    }
  }
}

TEST(Collectives, AllReduceIntegers) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : {at::kInt, at::kLong}) {
      at::Tensor t = at::full({5}, r + 1, at::TensorOptions().dtype(dtype).device(b.device));
      b.world->all_reduce(t, ReduceOp::sum)->wait();
      expect_equal(t, at::full({5}, n * (n + 1) / 2, at::kDouble), b.name + " int sum");
      at::Tensor m = at::full({3}, r, at::TensorOptions().dtype(dtype).device(b.device));
      b.world->all_reduce(m, ReduceOp::max)->wait();
      expect_equal(m, at::full({3}, n - 1, at::kDouble), b.name + " int max");
    }
  }
}

TEST(Collectives, SixteenBitSumIsRoundedOnce) {
  // Rank 0 holds 256, every other rank 1. In bf16, 256 + 1 rounds back to 256
  // at every hop; staged in fp32 the sum is 256 + (n-1), rounded once.
  for (const auto& b : backends()) {
    if (b.name == "nccl") continue;  // NCCL's own bf16 reduction rounds per hop by design
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : {at::kBFloat16, at::kHalf}) {
      const double mine = r == 0 ? (dtype == at::kBFloat16 ? 256.0 : 2048.0) : 1.0;
      at::Tensor t = at::full({4}, mine, at::TensorOptions().dtype(dtype).device(b.device));
      b.world->all_reduce(t, ReduceOp::sum)->wait();
      const double exact = (dtype == at::kBFloat16 ? 256.0 : 2048.0) + (n - 1);
      at::Tensor want = at::full({4}, exact, at::kFloat).to(dtype);
      expect_equal(t, want, std::string("16-bit sum ") + c10::toString(dtype));
    }
  }
}

TEST(Collectives, ReduceScatterOddAndEmptyChunks) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : kFloatTypes) {
      for (int64_t chunk : {0, 1, 3, 1001}) {
        at::Tensor in = rank_values(chunk * n, r, dtype, b.device);
        at::Tensor out = at::full({chunk}, -1.0, at::TensorOptions().dtype(dtype).device(b.device));
        b.world->reduce_scatter(out, in, ReduceOp::sum)->wait();
        at::Tensor all = at::arange(chunk * n, at::kDouble).remainder(5) * n + n * (n + 1) / 2;
        expect_equal(out, all.slice(0, r * chunk, (r + 1) * chunk).to(dtype).to(at::kDouble),
                     b.name + " reduce_scatter " + c10::toString(dtype) + " chunk " + std::to_string(chunk));
        if (chunk == 3) {
          at::Tensor avg = at::empty({chunk}, at::TensorOptions().dtype(dtype).device(b.device));
          b.world->reduce_scatter(avg, in, ReduceOp::avg)->wait();
          expect_equal(avg, (all.slice(0, r * chunk, (r + 1) * chunk) / n).to(dtype).to(at::kDouble),
                       b.name + " reduce_scatter avg");
        }
      }
    }
  }
}

TEST(Collectives, AllGatherOddAndEmptyChunks) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong, at::kByte}) {
      for (int64_t chunk : {0, 1, 5, 4099}) {
        at::Tensor in = at::full({chunk}, r + 1, at::TensorOptions().dtype(dtype).device(b.device));
        at::Tensor out = at::zeros({chunk * n}, at::TensorOptions().dtype(dtype).device(b.device));
        b.world->all_gather(out, in)->wait();
        at::Tensor want = at::arange(1, n + 1, at::kDouble).repeat_interleave(chunk);
        expect_equal(out, want, b.name + " all_gather " + c10::toString(dtype) + " chunk " + std::to_string(chunk));
      }
    }
  }
}

// ZeRO-1/2 gather the parameters in place: the input is this rank's chunk of the output.
TEST(Collectives, AllGatherInPlace) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : {at::kFloat, at::kBFloat16})
      for (int64_t chunk : {1, 4099}) {
        at::Tensor out = at::zeros({chunk * n}, at::TensorOptions().dtype(dtype).device(b.device));
        at::Tensor mine = out.narrow(0, r * chunk, chunk);
        mine.fill_(r + 1);
        b.world->all_gather(out, mine)->wait();
        at::Tensor want = at::arange(1, n + 1, at::kDouble).repeat_interleave(chunk);
        expect_equal(out, want, b.name + " in-place all_gather " + c10::toString(dtype) + " chunk " + std::to_string(chunk));
      }
  }
}

// ZeRO-1 reduces each gradient bucket in place: the output is this rank's chunk of the input.
TEST(Collectives, ReduceScatterInPlace) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto op : {ReduceOp::sum, ReduceOp::avg})
      for (int64_t chunk : {1, 4099}) {
        at::Tensor in = rank_values(chunk * n, r, at::kFloat, b.device);
        at::Tensor mine = in.narrow(0, r * chunk, chunk);
        b.world->reduce_scatter(mine, in, op)->wait();
        at::Tensor want = at::zeros({chunk * n}, at::kDouble);
        for (int q = 0; q < n; ++q) want += rank_values(chunk * n, q, at::kDouble, c10::Device(c10::kCPU));
        if (op == ReduceOp::avg) want /= n;
        expect_equal(mine, want.narrow(0, r * chunk, chunk),
                     b.name + " in-place reduce_scatter " + reduce_op_name(op) + " chunk " + std::to_string(chunk));
      }
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
      for (int root = 0; root < n; ++root) {
        at::Tensor t = at::full({17}, r == root ? 42 + root : -1, at::TensorOptions().dtype(dtype).device(b.device));
        b.world->broadcast(t, root)->wait();
        expect_equal(t, at::full({17}, 42 + root, at::kDouble), b.name + " broadcast root " + std::to_string(root));
      }
    }
  }
}

TEST(Collectives, SendRecvAroundARing) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    if (n < 2) continue;
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    at::Tensor out = at::full({1000}, r, at::TensorOptions().dtype(at::kFloat).device(b.device));
    at::Tensor in = at::empty({1000}, at::TensorOptions().dtype(at::kFloat).device(b.device));
    // Even ranks send first, odd ranks receive first: plain send/recv must not deadlock.
    if (r % 2 == 0) {
      auto s = b.world->send(out, next);
      auto q = b.world->recv(in, prev);
      s->wait();
      q->wait();
    } else {
      auto q = b.world->recv(in, prev);
      auto s = b.world->send(out, next);
      q->wait();
      s->wait();
    }
    expect_equal(in, at::full({1000}, prev, at::kDouble), b.name + " ring send/recv");
  }
}

TEST(Collectives, BatchedP2PExchangesBothWays) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    if (n < 2) continue;
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto opts = at::TensorOptions().dtype(at::kBFloat16).device(b.device);
    at::Tensor to_next = at::full({333}, r, opts), to_prev = at::full({7}, 100 + r, opts);
    at::Tensor from_prev = at::empty({333}, opts), from_next = at::empty({7}, opts);
    std::vector<P2POp> ops = {{P2POp::Kind::send, to_next, next}, {P2POp::Kind::recv, from_prev, prev}};
    ops.push_back({P2POp::Kind::send, to_prev, prev});
    ops.push_back({P2POp::Kind::recv, from_next, next});
    b.world->batch_p2p(ops)->wait();
    expect_equal(from_prev, at::full({333}, prev, at::kDouble), b.name + " batch p2p forward");
    expect_equal(from_next, at::full({7}, 100 + next, at::kDouble), b.name + " batch p2p backward");
  }
}

TEST(Collectives, BarrierAndManyOutstandingWorks) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    std::vector<at::Tensor> ts;
    std::vector<WorkPtr> works;
    for (int i = 0; i < 16; ++i) {
      ts.push_back(at::full({64}, r + i, at::TensorOptions().dtype(at::kFloat).device(b.device)));
      works.push_back(b.world->all_reduce(ts.back(), ReduceOp::sum));
    }
    for (auto& w : works) w->wait();
    for (int i = 0; i < 16; ++i)
      expect_equal(ts[i], at::full({64}, n * (n - 1) / 2 + n * i, at::kDouble), b.name + " outstanding " + std::to_string(i));
    b.world->barrier()->wait();
    EXPECT_TRUE(works.back()->completed());
  }
}

TEST(Collectives, BadArgumentsAreClearErrors) {
  for (const auto& b : backends()) {
    const int n = b.world->size();
    auto opts = at::TensorOptions().dtype(at::kFloat).device(b.device);
    at::Tensor out = at::empty({3}, opts), in = at::empty({3 * n + 1}, opts);
    try {
      b.world->reduce_scatter(out, in, ReduceOp::sum);
      ADD_FAILURE() << "accepted mismatched sizes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reduce_scatter on group 'world'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected output 3 x group size"), std::string::npos) << e.what();
    }
    at::Tensor dt = at::empty({3 * n}, opts.dtype(at::kDouble));
    EXPECT_THROW(b.world->all_gather(dt, out), Error);
    at::Tensor nc = at::empty({4, 4}, opts).t();
    EXPECT_THROW(b.world->all_reduce(nc, ReduceOp::sum), Error);
    at::Tensor t = at::empty({2}, opts);
    EXPECT_THROW(b.world->broadcast(t, n), Error);
    EXPECT_THROW(b.world->send(t, b.world->rank()), Error);
    at::Tensor ints = at::zeros({2}, opts.dtype(at::kLong));
    EXPECT_THROW(b.world->all_reduce(ints, ReduceOp::avg), Error);
  }
}

// The training device's communicator with tensors on the training device:
// NCCL with one GPU a rank, MPI through host memory when ranks share a GPU.
TEST(Collectives, DeviceWorldCarriesDeviceTensors) {
  const DistContext& ctx = stratum::test::context();
  if (!ctx.on_gpu()) GTEST_SKIP() << "this rank trains on the CPU";
  const auto& world = ctx.device_world();
  EXPECT_STREQ(world->backend(), ctx.gpu_world ? "nccl" : "mpi");
  EXPECT_EQ(ctx.device_comm, ctx.gpu_world ? DeviceComm::nccl : DeviceComm::mpi_staged);
  const int n = world->size(), r = world->rank();
  const std::string on = std::string(" on ") + world->backend() + " with " + ctx.device().str();
  auto opts = at::TensorOptions().dtype(at::kBFloat16).device(ctx.device());

  at::Tensor t = at::full({1000}, r + 1, opts);
  world->all_reduce(t, ReduceOp::avg)->wait();
  EXPECT_EQ(t.device(), ctx.device());
  expect_equal(t, at::full({1000}, (n + 1) / 2.0, at::kFloat).to(at::kBFloat16), "all_reduce avg" + on);

  at::Tensor in = rank_values(3 * n, r, at::kFloat, ctx.device()), out = at::empty({3}, in.options());
  world->reduce_scatter(out, in, ReduceOp::sum)->wait();
  at::Tensor all = at::arange(3 * n, at::kDouble).remainder(5) * n + n * (n + 1) / 2;
  expect_equal(out, all.slice(0, r * 3, (r + 1) * 3), "reduce_scatter" + on);

  at::Tensor mine = at::full({5}, r + 1, opts), gathered = at::zeros({5 * n}, opts);
  world->all_gather(gathered, mine)->wait();
  expect_equal(gathered, at::arange(1, n + 1, at::kDouble).repeat_interleave(5), "all_gather" + on);

  at::Tensor b = at::full({17}, r == n - 1 ? 7 : -1, opts.dtype(at::kLong));
  world->broadcast(b, n - 1)->wait();
  expect_equal(b, at::full({17}, 7, at::kDouble), "broadcast" + on);

  if (n > 1) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    at::Tensor to_next = at::full({333}, r, opts), from_prev = at::empty({333}, opts);
    world->batch_p2p({{P2POp::Kind::send, to_next, next}, {P2POp::Kind::recv, from_prev, prev}})->wait();
    expect_equal(from_prev, at::full({333}, prev, at::kDouble), "batch_p2p" + on);
    at::Tensor ring = at::empty({64}, opts.dtype(at::kFloat));
    WorkPtr s, q;
    if (r % 2 == 0) {
      s = world->send(at::full({64}, 10 + r, opts.dtype(at::kFloat)), next);
      q = world->recv(ring, prev);
    } else {
      q = world->recv(ring, prev);
      s = world->send(at::full({64}, 10 + r, opts.dtype(at::kFloat)), next);
    }
    s->wait();
    q->wait();
    expect_equal(ring, at::full({64}, 10 + prev, at::kDouble), "send/recv" + on);
  }
  world->barrier()->wait();
}

#ifdef STRATUM_WITH_CUDA
// MPI copies a CUDA tensor out on its current stream: values a side stream is
// still writing when the collective is issued are the ones reduced.
TEST(Collectives, MpiStagesAfterTheCurrentStreamsWork) {
  const DistContext& ctx = stratum::test::context();
  if (!ctx.on_gpu()) GTEST_SKIP() << "this rank trains on the CPU";
  const int n = ctx.cpu_world->size(), r = ctx.cpu_world->rank();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(ctx.cuda_device));
  c10::cuda::CUDAStreamGuard guard(side);
  at::Tensor t = at::zeros({1 << 22}, at::TensorOptions().dtype(at::kFloat).device(ctx.device()));
  for (int i = 0; i < 20; ++i) t.add_(1.0).mul_(1.0);  // queued work the copy must come after
  t.add_(r);
  WorkPtr w = ctx.cpu_world->all_reduce(t, ReduceOp::sum);
  w->wait();
  expect_equal(t.slice(0, 0, 1 << 12), at::full({1 << 12}, 20.0 * n + n * (n - 1) / 2.0, at::kDouble),
               "all_reduce after side-stream work");
  // Many in flight at once: each holds its own host buffer until it completes.
  std::vector<at::Tensor> ts;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(at::full({4096 << i}, i + r, t.options()));
    works.push_back(ctx.cpu_world->all_reduce(ts.back(), ReduceOp::sum));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int i = 0; i < 8; ++i)
    expect_equal(ts[i].slice(0, 0, 16), at::full({16}, n * i + n * (n - 1) / 2.0, at::kDouble),
                 "outstanding staged all_reduce " + std::to_string(i));
}
#endif

// Sub-communicators of a DP x TP grid: each group reduces only over its members.
TEST(Collectives, SubGroupsOfAGrid) {
  for (const auto& b : backends()) {
    const int n = b.world->size(), r = b.world->rank();
    if (n % 2 != 0) continue;
    Topology topo = Topology::from_model_parallel(n, 1, 2);  // tp 2, dp n/2
    ParallelGroups g = make_parallel_groups(topo, b.world);
    EXPECT_EQ(g.tp->size(), 2);
    EXPECT_EQ(g.dp->size(), n / 2);
    EXPECT_EQ(g.pp->size(), 1);
    EXPECT_EQ(g.dp_tp->size(), n);
    EXPECT_EQ(g.tp->global_ranks(), topo.group(Axis::tp, r));
    EXPECT_EQ(g.dp->global_ranks(), topo.group(Axis::dp, r));
    at::Tensor t = at::full({8}, r, at::TensorOptions().dtype(at::kFloat).device(b.device));
    g.tp->all_reduce(t, ReduceOp::sum)->wait();
    double tp_sum = 0;
    for (auto m : topo.group(Axis::tp, r)) tp_sum += m;
    expect_equal(t, at::full({8}, tp_sum, at::kDouble), b.name + " tp all_reduce");
    at::Tensor u = at::full({8}, r, at::TensorOptions().dtype(at::kFloat).device(b.device));
    g.dp->all_reduce(u, ReduceOp::max)->wait();
    double dp_max = 0;
    for (auto m : topo.group(Axis::dp, r)) dp_max = std::max<double>(dp_max, m);
    expect_equal(u, at::full({8}, dp_max, at::kDouble), b.name + " dp all_reduce");
    // All-gather within the TP group sees the TP peers in group order.
    at::Tensor mine = at::full({2}, r, at::TensorOptions().dtype(at::kFloat).device(b.device));
    at::Tensor all = at::empty({4}, mine.options());
    g.tp->all_gather(all, mine)->wait();
    auto peers = topo.group(Axis::tp, r);
    expect_equal(all, at::tensor({double(peers[0]), double(peers[0]), double(peers[1]), double(peers[1])}, at::kDouble),
                 b.name + " tp all_gather");
  }
}

TEST(Collectives, SplitRejectsABadPartition) {
  for (const auto& b : backends()) {
    const int n = b.world->size();
    if (n > 1) EXPECT_THROW(b.world->split({{0}}, "partial"), Error) << "rank " << b.world->rank();
    std::vector<std::vector<int64_t>> dup(1);
    for (int i = 0; i < n; ++i) dup[0].push_back(i);
    dup[0].push_back(0);
    EXPECT_THROW(b.world->split(dup, "dup"), Error);
    EXPECT_THROW(b.world->split({{n}}, "outside"), Error);
  }
}
