// main() for tests that run as several processes under mpirun: every rank runs
// every test; rank 0 prints the usual output, other ranks only their failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include "distributed_test_context.h"
#include "stratum/distributed/init.h"

namespace stratum::test {
namespace {
distributed::DistContext* g_context = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

const distributed::DistContext& context() { return *g_context; }

}  // namespace stratum::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  stratum::distributed::DistContext ctx = stratum::distributed::init();
  stratum::test::g_context = &ctx;
  if (ctx.rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new stratum::test::FailurePrinter(ctx.rank));
  }
  int rc = RUN_ALL_TESTS();
  // Every rank must agree on success, or mpirun would report only the first.
  int failed = rc != 0, any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  // The last communicators: MPI finalizes as they go (distributed/mpi_session.h).
  ctx.cpu_world.reset();
  ctx.gpu_world.reset();
  stratum::distributed::finalize();
  return any_failed ? 1 : 0;
}
