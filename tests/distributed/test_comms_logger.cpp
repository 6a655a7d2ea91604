// The comms logger, on whatever world size mpirun gives (CTest runs it at 1, 2
// and 4 ranks): bandwidth arithmetic and the summary table on CommsLog itself,
// then the LoggedCommunicator decorator over MPI (and NCCL on GPU machines):
// what it records, that it changes no result, prof_ops, verbose lines, split,
// and the desync detector in its throwing mode. desync_probe.cpp and
// test_desync_process.cpp cover the job-ending mode.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "distributed_test_context.h"
#include "stratum/core/log.h"
#include "stratum/distributed/logged_communicator.h"
#include "stratum/distributed/parallel_groups.h"

using namespace stratum;
using namespace stratum::distributed;
using stratum::test::backends;
using stratum::test::context;

namespace {

config::CommsLoggerConfig profile_all() {
  config::CommsLoggerConfig c;
  c.enabled = true;
  c.prof_all = true;
  return c;
}

config::CommsLoggerConfig debug_only() {
  config::CommsLoggerConfig c;
  c.debug = true;
  return c;
}

// A logger over backend `b`, with the CPU world as the desync control.
std::shared_ptr<Communicator> logged(const test::Backend& b, const config::CommsLoggerConfig& c,
                                     std::shared_ptr<CommsLog> log,
                                     DesyncAction on_desync = DesyncAction::throw_error) {
  return with_comms_logger(b.world, context().cpu_world, c, std::move(log), on_desync);
}

const CommStats* find(const std::vector<CommStats>& stats, CommOp op, int64_t bytes) {
  for (const auto& s : stats)
    if (s.op == op && s.bytes == bytes) return &s;
  return nullptr;
}

at::TensorOptions opts(const test::Backend& b, at::ScalarType dtype = at::kFloat) {
  return at::TensorOptions().dtype(dtype).device(b.device);
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

// --- CommsLog: exact arithmetic on records with known latencies -------------

TEST(CommsLog, BusbwFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::all_reduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::all_gather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::all_gather, 1), 0.0);
  for (CommOp op : {CommOp::broadcast, CommOp::send, CommOp::recv, CommOp::batch_p2p})
    EXPECT_DOUBLE_EQ(busbw_factor(op, 4), 1.0) << comm_op_name(op);
  EXPECT_DOUBLE_EQ(busbw_factor(CommOp::barrier, 4), 0.0);
}

TEST(CommsLog, BandwidthOfKnownRecords) {
  CommsLog log;
  // 1 GB in 0.5 s over 4 ranks: algbw 16 Gbps, all_reduce busbw x1.5 = 24.
  log.record(CommOp::all_reduce, 1'000'000'000, 0.5, 4);
  auto stats = log.stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_DOUBLE_EQ(stats[0].algbw_gbps(), 16.0);
  EXPECT_DOUBLE_EQ(stats[0].busbw_gbps(), 24.0);

  // Same (op, size) again: one row, count 2; rates over the total time.
  log.record(CommOp::all_reduce, 1'000'000'000, 1.5, 4);
  log.record(CommOp::all_gather, 1'000'000'000, 1.0, 4);
  log.record(CommOp::barrier, 0, 0.001, 4);
  stats = log.stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].op, CommOp::all_reduce);  // enum order
  EXPECT_EQ(stats[1].op, CommOp::all_gather);
  EXPECT_EQ(stats[2].op, CommOp::barrier);
  EXPECT_EQ(stats[0].count, 2);
  EXPECT_DOUBLE_EQ(stats[0].total_seconds, 2.0);
  EXPECT_DOUBLE_EQ(stats[0].avg_seconds(), 1.0);
  EXPECT_DOUBLE_EQ(stats[0].min_seconds, 0.5);
  EXPECT_DOUBLE_EQ(stats[0].max_seconds, 1.5);
  EXPECT_DOUBLE_EQ(stats[0].algbw_gbps(), 8.0);
  EXPECT_DOUBLE_EQ(stats[0].busbw_gbps(), 12.0);
  EXPECT_DOUBLE_EQ(stats[1].algbw_gbps(), 8.0);
  EXPECT_DOUBLE_EQ(stats[1].busbw_gbps(), 6.0);
  EXPECT_DOUBLE_EQ(stats[2].algbw_gbps(), 0.0);
  EXPECT_DOUBLE_EQ(stats[2].busbw_gbps(), 0.0);
  EXPECT_EQ(log.total_count(), 4);
  log.reset();
  EXPECT_TRUE(log.stats().empty());
  EXPECT_DOUBLE_EQ(gbps(1e9, 0.0), 0.0);  // no time measured: no rate, no division by zero
}

TEST(CommsLog, SummaryTableHasHeaderAndOneRowPerOpAndSize) {
  CommsLog log;
  log.record(CommOp::all_reduce, 4096, 0.001, 2);
  log.record(CommOp::all_reduce, 4096, 0.003, 2);
  log.record(CommOp::all_reduce, 4 << 20, 0.002, 2);
  log.record(CommOp::all_gather, 1024, 0.001, 2);
  const std::string table = log.summary();
  const std::string header = table.substr(0, table.find('\n'));
  for (const char* col : {"Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
                          "tput_avg (Gbps)", "busbw_avg (Gbps)"})
    EXPECT_NE(header.find(col), std::string::npos) << col << "\n" << table;
  EXPECT_EQ(count_of(table, "\n"), 1 + 2 + 3) << table;  // header, two op lines, three size rows
  EXPECT_EQ(table.find(" \n"), std::string::npos) << "trailing blanks\n" << table;
  EXPECT_NE(table.find("\nall_reduce\n"), std::string::npos) << table;
  EXPECT_NE(table.find("\nall_gather\n"), std::string::npos) << table;
  // 4.0 KiB x2: 4.00 ms in total, 2.00 ms on average, 8 KiB x 8 bit / 4 ms.
  EXPECT_NE(table.find("4.0 KiB             2                   4.00                2.00                0.02"),
            std::string::npos) << table;
  EXPECT_NE(table.find("4.0 MiB             1                   2.00                2.00                16.78"),
            std::string::npos) << table;

  const nlohmann::json j = log.to_json();
  EXPECT_EQ(j["total_count"], 4);
  const auto& row = j["summary"]["all_reduce"]["4096"];
  EXPECT_EQ(row["count"], 2);
  EXPECT_DOUBLE_EQ(row["total_latency_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(row["min_latency_ms"].get<double>(), 1.0);
  EXPECT_EQ(row["msg_size_str"], "4.0 KiB");
  EXPECT_EQ(j["summary"]["all_gather"]["1024"]["msg_size_bytes"], 1024);
}

TEST(CommsLog, VerboseLineFormat) {
  // 4 MiB in 1 ms: 33.55 Gbps; all_reduce over 2 ranks has busbw factor 1.
  EXPECT_EQ(format_comm_op_line(CommOp::all_reduce, 4 << 20, 0.001, 2),
            "comm op: all_reduce | time (ms): 1.00 | msg size: 4.0 MiB | algbw (Gbps): 33.55 | busbw (Gbps): 33.55");
}

// --- The desync verdict, on fingerprints made up here ------------------------

TEST(DesyncCheck, AgreementIsNoReport) {
  CollectiveFingerprint f{CommOp::all_reduce, 4096, static_cast<int64_t>(at::kFloat), 0, -1, 7};
  EXPECT_EQ(find_desync({f, f, f}, "dp", {0, 2, 4}), "");
  EXPECT_EQ(CollectiveFingerprint::unpack(f.pack().data()).pack(), f.pack());
}

TEST(DesyncCheck, ReportNamesEveryRanksCallGroupingEqualOnes) {
  const int64_t f32 = static_cast<int64_t>(at::kFloat), bf16 = static_cast<int64_t>(at::kBFloat16);
  CollectiveFingerprint ar{CommOp::all_reduce, 4096, f32, static_cast<int64_t>(ReduceOp::sum), -1, 3};
  CollectiveFingerprint ag{CommOp::all_gather, 16384, bf16, -1, -1, 3};
  CollectiveFingerprint bc{CommOp::broadcast, 4096, f32, -1, 1, 3};
  EXPECT_EQ(find_desync({ar, ag, ar, bc}, "dp", {0, 2, 4, 6}),
            "desync on group 'dp' [ranks 0, 2, 4, 6] at collective #3: ranks 0, 4 issued all_reduce (4.0 KiB Float, "
            "sum); rank 2 issued all_gather (16.0 KiB BFloat16); rank 6 issued broadcast (4.0 KiB Float, root 1) "
            "(every rank of a group must issue the same collectives in the same order)");
}

TEST(DesyncCheck, SkippedCollectiveShowsEachRanksCount) {
  CollectiveFingerprint a{CommOp::barrier, 0, -1, -1, -1, 5};
  CollectiveFingerprint b = a;
  b.seq = 4;
  const std::string msg = find_desync({a, b}, "world", {0, 1});
  EXPECT_NE(msg.find("at collective #5: rank 0 issued barrier; rank 1 issued barrier as its collective #4"),
            std::string::npos) << msg;
}

// --- LoggedCommunicator over the real backends --------------------------------

TEST(CommsLogger, NeitherEnabledNorDebugReturnsInnerUnchanged) {
  config::CommsLoggerConfig off;
  auto inner = context().cpu_world;
  EXPECT_EQ(with_comms_logger(inner, inner, off).get(), inner.get());
  auto on = with_comms_logger(inner, inner, profile_all());
  EXPECT_NE(on.get(), inner.get());
  EXPECT_STREQ(on->backend(), "mpi");
  EXPECT_EQ(on->name(), inner->name());
  EXPECT_EQ(on->rank(), inner->rank());
  EXPECT_EQ(on->global_ranks(), inner->global_ranks());
}

TEST(CommsLogger, RecordsCountAndSizePerOp) {
  for (const auto& b : backends()) {
    auto log = std::make_shared<CommsLog>();
    auto comm = logged(b, profile_all(), log);
    const int n = comm->size(), r = comm->rank();
    for (int i = 0; i < 3; ++i) {
      at::Tensor t = at::ones({1024}, opts(b));
      comm->all_reduce(t, ReduceOp::sum)->wait();
    }
    at::Tensor in = at::ones({100}, opts(b)), out = at::empty({100 * n}, opts(b));
    comm->all_gather(out, in)->wait();
    at::Tensor rs_in = at::ones({8 * n}, opts(b)), rs_out = at::empty({8}, opts(b));
    comm->reduce_scatter(rs_out, rs_in, ReduceOp::sum)->wait();
    at::Tensor bc = at::ones({10}, opts(b, at::kDouble));
    comm->broadcast(bc, 0)->wait();
    comm->barrier()->wait();
    int expected = 7;
    if (n >= 2) {
      at::Tensor to_next = at::ones({16}, opts(b)), from_prev = at::empty({16}, opts(b));
      comm->batch_p2p({{P2POp::Kind::send, to_next, (r + 1) % n}, {P2POp::Kind::recv, from_prev, (r + n - 1) % n}})
          ->wait();
      at::Tensor one = at::ones({16}, opts(b));
      if (r == 0) comm->send(one, 1)->wait();
      if (r == 1) comm->recv(one, 0)->wait();
      expected += 1 + (r <= 1 ? 1 : 0);
    }

    const auto stats = log->stats();
    EXPECT_EQ(log->total_count(), expected) << b.name << "\n" << log->summary();
    // nccl-tests sizes: all_gather counts its output, reduce_scatter its input.
    const std::vector<std::tuple<CommOp, int64_t, int64_t>> want = {
        {CommOp::all_reduce, 4096, 3}, {CommOp::all_gather, 400 * n, 1}, {CommOp::reduce_scatter, 32 * n, 1},
        {CommOp::broadcast, 80, 1},    {CommOp::barrier, 0, 1}};
    for (const auto& [op, bytes, count] : want) {
      const CommStats* s = find(stats, op, bytes);
      ASSERT_NE(s, nullptr) << b.name << " " << comm_op_name(op) << " " << bytes << "\n" << log->summary();
      EXPECT_EQ(s->count, count) << b.name << " " << comm_op_name(op);
      EXPECT_GT(s->total_seconds, 0.0) << b.name << " " << comm_op_name(op);
      EXPECT_DOUBLE_EQ(s->bus_bytes, static_cast<double>(bytes) * count * busbw_factor(op, n));
    }
    if (n >= 2) {
      EXPECT_NE(find(stats, CommOp::batch_p2p, 128), nullptr) << log->summary();
      if (r == 0) EXPECT_NE(find(stats, CommOp::send, 64), nullptr) << log->summary();
      if (r == 1) EXPECT_NE(find(stats, CommOp::recv, 64), nullptr) << log->summary();
    }
  }
}

TEST(CommsLogger, LoggedResultsEqualUnlogged) {
  for (const auto& b : backends()) {
    for (const auto& cfg : {profile_all(), debug_only()}) {
      auto comm = logged(b, cfg, nullptr);
      const int n = comm->size(), r = comm->rank();
      auto values = [&](int64_t numel) { return (at::arange(numel, opts(b)).remainder(7) + r).contiguous(); };

      at::Tensor a = values(1001), a_ref = values(1001);
      comm->all_reduce(a, ReduceOp::max)->wait();
      b.world->all_reduce(a_ref, ReduceOp::max)->wait();
      EXPECT_TRUE(at::equal(a.cpu(), a_ref.cpu())) << b.name << " all_reduce";

      at::Tensor rs_in = values(5 * n), rs = at::empty({5}, opts(b)), rs_ref = at::empty({5}, opts(b));
      comm->reduce_scatter(rs, rs_in, ReduceOp::avg)->wait();
      b.world->reduce_scatter(rs_ref, rs_in, ReduceOp::avg)->wait();
      EXPECT_TRUE(at::equal(rs.cpu(), rs_ref.cpu())) << b.name << " reduce_scatter";

      at::Tensor ag_in = values(3), ag = at::empty({3 * n}, opts(b)), ag_ref = at::empty({3 * n}, opts(b));
      comm->all_gather(ag, ag_in)->wait();
      b.world->all_gather(ag_ref, ag_in)->wait();
      EXPECT_TRUE(at::equal(ag.cpu(), ag_ref.cpu())) << b.name << " all_gather";

      at::Tensor bc = values(9), bc_ref = values(9);
      comm->broadcast(bc, n - 1)->wait();
      b.world->broadcast(bc_ref, n - 1)->wait();
      EXPECT_TRUE(at::equal(bc.cpu(), bc_ref.cpu())) << b.name << " broadcast";
      EXPECT_TRUE(at::equal(bc.cpu(), (at::arange(9, at::kFloat).remainder(7) + (n - 1))))
          << b.name << " broadcast from the last rank";
    }
  }
}

TEST(CommsLogger, VerboseLogsOneLinePerProfiledOp) {
  const log::Level saved = log::level();
  log::set_level(log::Level::info);
  auto cfg = profile_all();
  cfg.verbose = true;
  auto comm = logged(backends()[0], cfg, nullptr);
  testing::internal::CaptureStdout();
  at::Tensor t = at::ones({1024});
  comm->all_reduce(t, ReduceOp::sum)->wait();
  auto work = comm->barrier();
  work->wait();
  work->wait();  // recorded once, however often it is waited on
  const std::string out = testing::internal::GetCapturedStdout();
  log::set_level(saved);
  EXPECT_EQ(count_of(out, "comm op: "), 2) << out;
  EXPECT_NE(out.find("info: comm op: all_reduce | time (ms): "), std::string::npos) << out;
  EXPECT_NE(out.find(" | msg size: 4.0 KiB | algbw (Gbps): "), std::string::npos) << out;
  EXPECT_NE(out.find("comm op: barrier | time (ms): "), std::string::npos) << out;
}

TEST(CommsLogger, ProfOpsSelectsWhatIsRecorded) {
  const test::Backend b = backends()[0];  // a copy: backends() returns a temporary
  const int n = b.world->size();
  auto cfg = profile_all();
  cfg.prof_all = false;
  cfg.prof_ops = {"all_gather_into_tensor", "barrier"};  // DeepSpeed's spelling is accepted
  auto log = std::make_shared<CommsLog>();
  auto comm = logged(b, cfg, log);
  auto* lc = dynamic_cast<LoggedCommunicator*>(comm.get());
  ASSERT_NE(lc, nullptr);
  EXPECT_TRUE(lc->profiles(CommOp::all_gather));
  EXPECT_FALSE(lc->profiles(CommOp::all_reduce));
  at::Tensor t = at::ones({4});
  comm->all_reduce(t, ReduceOp::sum)->wait();
  at::Tensor out = at::empty({4 * n});
  comm->all_gather(out, t)->wait();
  comm->barrier()->wait();
  const auto stats = log->stats();
  ASSERT_EQ(stats.size(), 2u) << log->summary();
  EXPECT_EQ(stats[0].op, CommOp::all_gather);
  EXPECT_EQ(stats[1].op, CommOp::barrier);

  // Debug alone checks but records nothing.
  auto quiet_log = std::make_shared<CommsLog>();
  auto quiet = logged(b, debug_only(), quiet_log);
  quiet->all_reduce(t, ReduceOp::sum)->wait();
  EXPECT_EQ(quiet_log->total_count(), 0);
}

TEST(CommsLogger, UnknownProfOpIsAnError) {
  auto cfg = profile_all();
  cfg.prof_ops = {"all_reduce", "allreduce"};
  try {
    logged(backends()[0], cfg, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comms_logger.prof_ops: unknown operation 'allreduce'"), std::string::npos)
        << e.what();
  }
}

TEST(CommsLogger, SplitKeepsLoggingIntoTheSameLog) {
  for (const auto& b : backends()) {
    for (auto cfg : {profile_all(), debug_only()}) {
      cfg.enabled = true;  // debug_only() + profiling: split must keep both
      auto log = std::make_shared<CommsLog>();
      auto world = logged(b, cfg, log);
      const int n = world->size();
      // Two halves (one group at a single rank).
      std::vector<std::vector<int64_t>> halves(n >= 2 ? 2 : 1);
      for (int r = 0; r < n; ++r) halves[n >= 2 && r >= n / 2 ? 1 : 0].push_back(r);
      auto half = world->split(halves, "half");
      ASSERT_NE(std::dynamic_pointer_cast<LoggedCommunicator>(half), nullptr);
      EXPECT_EQ(half->name(), "half");
      EXPECT_STREQ(half->backend(), b.world->backend());
      const int m = half->size();
      at::Tensor t = at::ones({256}, opts(b));
      half->all_reduce(t, ReduceOp::sum)->wait();
      EXPECT_TRUE(at::equal(t.cpu(), at::full({256}, m, at::kFloat))) << b.name;
      const CommStats* s = find(log->stats(), CommOp::all_reduce, 1024);
      ASSERT_NE(s, nullptr) << log->summary();
      EXPECT_EQ(s->count, 1);
      EXPECT_DOUBLE_EQ(s->bus_bytes, 1024 * busbw_factor(CommOp::all_reduce, m));  // the half's size, not the world's
    }
  }
}

TEST(CommsLogger, DebugModePassesMatchingSequences) {
  for (const auto& b : backends()) {
    auto comm = logged(b, debug_only(), nullptr, DesyncAction::throw_error);
    const int n = comm->size();
    for (int step = 0; step < 3; ++step) {
      at::Tensor t = at::ones({64}, opts(b, at::kBFloat16));
      comm->all_reduce(t, ReduceOp::sum)->wait();
      EXPECT_TRUE(at::equal(t.cpu().to(at::kFloat), at::full({64}, n, at::kFloat))) << b.name;
      at::Tensor out = at::empty({64 * n}, opts(b, at::kBFloat16));
      comm->all_gather(out, t)->wait();
      at::Tensor rs = at::empty({64}, opts(b, at::kBFloat16));
      comm->reduce_scatter(rs, out, ReduceOp::max)->wait();
      comm->broadcast(t, 0)->wait();
      comm->barrier()->wait();
    }
  }
}

TEST(CommsLogger, DebugModeThrowsOnDesyncOnEveryRank) {
  const test::Backend b = backends()[0];  // a copy: backends() returns a temporary
  auto comm = logged(b, debug_only(), nullptr, DesyncAction::throw_error);
  const int n = comm->size(), r = comm->rank();
  if (n < 2) GTEST_SKIP() << "a desync needs two ranks";
  comm->barrier()->wait();  // collective #1 agrees

  // #2: rank 1 gathers while the others reduce.
  at::Tensor t = at::ones({1024});
  at::Tensor out = at::empty({1024 * n});
  try {
    if (r == 1) comm->all_gather(out, t)->wait();
    else comm->all_reduce(t, ReduceOp::sum)->wait();
    ADD_FAILURE() << "no desync reported";
  } catch (const CommDesync& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("desync on group 'world' [ranks 0, 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at collective #2: "), std::string::npos) << msg;
    const std::string others = n == 2 ? "rank 0 issued" : n == 3 ? "ranks 0, 2 issued" : "ranks 0, 2, 3 issued";
    EXPECT_NE(msg.find(others + " all_reduce (4.0 KiB Float, sum)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 issued all_gather (" + format_bytes(4096 * n) + " Float)"), std::string::npos) << msg;
  }

  // #3: the same op with a different size on the last rank.
  at::Tensor sized = at::ones({r == n - 1 ? 2048 : 1024});
  EXPECT_THROW(comm->all_reduce(sized, ReduceOp::sum), CommDesync);

  // The check stops a call before it is issued, so the group still works.
  at::Tensor ok = at::ones({8});
  comm->all_reduce(ok, ReduceOp::sum)->wait();
  EXPECT_TRUE(at::equal(ok, at::full({8}, n, at::kFloat)));
}

TEST(CommsLogger, ParallelGroupsOfALoggedWorldAreLoggedAndChecked) {
  const test::Backend b = backends()[0];
  const int n = b.world->size();
  auto cfg = profile_all();
  cfg.debug = true;
  auto log = std::make_shared<CommsLog>();
  auto world = logged(b, cfg, log, DesyncAction::throw_error);
  const int64_t dp = n % 2 == 0 ? 2 : n;
  ParallelGroups groups = make_parallel_groups(Topology::create(n, dp, 1, n / dp), world);
  for (const auto* g : {&groups.dp, &groups.pp, &groups.tp, &groups.dp_tp})
    ASSERT_NE(std::dynamic_pointer_cast<LoggedCommunicator>(*g), nullptr);
  at::Tensor t = at::ones({32});
  groups.tp->all_reduce(t, ReduceOp::sum)->wait();
  EXPECT_TRUE(at::equal(t, at::full({32}, n / dp, at::kFloat)));
  const CommStats* s = find(log->stats(), CommOp::all_reduce, 128);
  ASSERT_NE(s, nullptr) << log->summary();
  EXPECT_EQ(s->count, 1);

  if (groups.dp->size() < 2) return;
  // A desync inside one dp group is reported with that group's world ranks.
  std::string ranks;
  for (int64_t r : groups.dp->global_ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  try {
    if (groups.dp->rank() == 1) groups.dp->barrier();
    else groups.dp->all_reduce(t, ReduceOp::sum);
    ADD_FAILURE() << "no desync reported";
  } catch (const CommDesync& e) {
    EXPECT_NE(std::string(e.what()).find("desync on group 'dp' [ranks " + ranks + "] at collective #1: "),
              std::string::npos) << e.what();
  }
}
