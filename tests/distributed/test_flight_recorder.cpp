// The flight recorder's ring (wraparound, open and closed entries, the file's
// text) and the hang report's analysis over several ranks' files.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/distributed/flight_recorder.h"
#include "stratum/distributed/flight_report.h"

using namespace stratum::distributed;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(FlightRecorder, RingKeepsTheNewestEntriesOldestFirst) {
  FlightRecorder rec(0, 2, 4);
  const int g = rec.add_group("world", "mpi", {0, 1});
  std::vector<uint64_t> ids;
  for (uint64_t seq = 1; seq <= 6; ++seq) ids.push_back(rec.begin(g, seq, "all_reduce", 64));
  const auto e = rec.entries();
  ASSERT_EQ(e.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(e[i].seq, i + 3);  // 1 and 2 were overwritten
  rec.end(ids[0]);  // its slot holds #5 now: nothing happens to it
  EXPECT_EQ(rec.entries()[2].end_us, 0);
  rec.end(ids[4]);
  EXPECT_GT(rec.entries()[2].end_us, 0);
  EXPECT_EQ(rec.groups()[0].issued, 6u);
  EXPECT_EQ(rec.groups()[0].completed, 5u);
  rec.drop(ids[5]);
  EXPECT_EQ(rec.entries().size(), 3u);
}

TEST(FlightRecorder, GroupsAreKnownByNameBackendAndMembers) {
  FlightRecorder rec(0, 4);
  EXPECT_EQ(rec.add_group("dp", "mpi", {0, 2}), 0);
  EXPECT_EQ(rec.add_group("dp", "mpi", {0, 2}), 0);
  EXPECT_EQ(rec.add_group("dp", "nccl", {0, 2}), 1);
  EXPECT_EQ(rec.add_group("dp", "mpi", {1, 3}), 2);
}

TEST(FlightRecorder, FileTextRoundTripsOpenAndClosedEntries) {
  FlightRecorder rec(1, 2);
  const int world = rec.add_group("world", "mpi", {0, 1});
  const int pp = rec.add_group("pipeline stage 0", "mpi", {0, 1});
  rec.end(rec.begin(world, 1, "all_reduce", 4096));
  rec.count_p2p(pp, 0, false);
  rec.waiting(rec.begin(pp, 1, "recv", 1 << 20, 0, false, true));
  const std::string text = rec.format("periodic");
  EXPECT_TRUE(has(text, "stratum-flight 1\nrank 1 world 2 pid ")) << text;
  EXPECT_TRUE(has(text, "group 1 issued 1 completed 0 backend mpi ranks 0,1 name pipeline stage 0\n")) << text;
  EXPECT_TRUE(has(text, "p2p 1 peer 0 sent 0 received 1\n")) << text;
  EXPECT_TRUE(has(text, " recv bytes 1048576 peer 0 sent 0 received 1 start ")) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(" wait [0-9.]+ end -\n"))) << text;  // the open recv, blocked on

  const RankFlight f = parse_flight_file(text, "rank1.txt");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.world_size, 2);
  EXPECT_EQ(f.reason, "periodic");
  ASSERT_EQ(f.groups.size(), 2u);
  EXPECT_EQ(f.groups[1].name, "pipeline stage 0");
  EXPECT_EQ(f.groups[1].backend, "mpi");
  ASSERT_EQ(f.ops.size(), 2u);
  EXPECT_EQ(f.ops[0].op, "all_reduce");
  EXPECT_TRUE(f.ops[0].end.has_value());
  EXPECT_GE(*f.ops[0].end, f.ops[0].start);
  EXPECT_EQ(f.ops[1].peer, 0);
  EXPECT_EQ(f.ops[1].received, 1u);
  EXPECT_TRUE(f.ops[1].wait.has_value());
  EXPECT_FALSE(f.ops[1].end.has_value());
  ASSERT_EQ(f.groups[1].p2p.size(), 1u);
  EXPECT_EQ(f.groups[1].p2p[0].peer, 0);
  EXPECT_EQ(f.groups[1].p2p[0].received, 1u);
}

TEST(FlightRecorder, BadFilesAreNamedWithTheirLine) {
  try {
    parse_flight_file("stratum-flight 1\nrank 0 world 2 pid 1 host h\nop 1 group 3 seq 1 all_reduce bytes 1 peer -1 "
                      "sent 0 received 0 start 1 wait - end -\n",
                      "/d/rank0.txt");
    FAIL();
  } catch (const stratum::Error& e) {
    EXPECT_TRUE(has(e.what(), "/d/rank0.txt:3: group 3 is not listed before it")) << e.what();
  }
  EXPECT_THROW(parse_flight_file("hello\n", "x"), stratum::Error);
  EXPECT_THROW(parse_flight_file("", "x"), stratum::Error);
}

// Rank r's file after `ops` operations on `group` (its last one left open and
// blocked on when `open_last`); a send or recv goes to group rank `peer`.
RankFlight rank_file(int rank, int world, const std::string& group, const std::vector<int64_t>& members, int ops,
                     bool open_last, const std::string& op = "all_reduce", int peer = -1) {
  const char* name = op == "send" ? "send" : op == "recv" ? "recv" : "all_reduce";
  FlightRecorder rec(rank, world);
  const int g = rec.add_group(group, "mpi", members);
  for (int s = 1; s <= ops; ++s) {
    if (peer >= 0) rec.count_p2p(g, peer, op == "send");
    const uint64_t id = rec.begin(g, s, name, 4096, peer, op == "send", op == "recv");
    if (s < ops || !open_last) rec.end(id);
    else rec.waiting(id);
  }
  return parse_flight_file(rec.format("periodic"), "rank" + std::to_string(rank) + ".txt");
}

TEST(FlightReport, NamesTheRanksBehindTheOpenCollective) {
  const std::vector<int64_t> all{0, 1, 2, 3};
  const std::vector<RankFlight> ranks{rank_file(0, 4, "dp", all, 12, true), rank_file(1, 4, "dp", all, 11, false),
                                      rank_file(2, 4, "dp", all, 12, true)};  // rank 3: no file
  const auto stalls = find_stalls(ranks, 4);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].op, "all_reduce");
  EXPECT_EQ(stalls[0].seq, 12u);
  EXPECT_EQ(stalls[0].group, "dp");
  EXPECT_EQ(stalls[0].waiting, (std::vector<int>{0, 2}));
  ASSERT_EQ(stalls[0].behind.size(), 1u);
  EXPECT_EQ(stalls[0].behind[0].rank, 1);
  EXPECT_EQ(stalls[0].behind[0].issued, 11u);
  EXPECT_EQ(stalls[0].no_file, (std::vector<int>{3}));

  FlightDir dir{"/run/flight", 4, ranks, {}};
  const std::string report = hang_report(dir, {}, flight_now_seconds(), 3);
  EXPECT_TRUE(has(report, "flight recorder: files of 3 of 4 ranks in /run/flight")) << report;
  EXPECT_TRUE(has(report, "all_reduce #12 on mpi group 'dp' [ranks 0, 1, 2, 3]: ranks 0, 2 wait in it")) << report;
  EXPECT_TRUE(has(report, "not arrived: rank 1 (at #11 when it last wrote its file), rank 3 (no file)")) << report;
  EXPECT_TRUE(has(report, "highest number reached on 'dp': rank 0 #12 (open), rank 1 #11, rank 2 #12 (open), rank 3 ?"))
      << report;
  EXPECT_TRUE(has(report, "rank 1 (host ")) << report;
  EXPECT_TRUE(has(report, "its last 3 operations:\n    all_reduce #9 on 'dp' 4.0 KiB: done in")) << report;
  EXPECT_TRUE(has(report, "all_reduce #11 on 'dp' 4.0 KiB: done in")) << report;
  EXPECT_TRUE(has(report, "no report from rank 3 (stopped or dead")) << report;
}

TEST(FlightReport, EveryoneInTheOpIsNoStall) {
  const std::vector<int64_t> pair{0, 1};
  const std::vector<RankFlight> ranks{rank_file(0, 2, "world", pair, 5, true), rank_file(1, 2, "world", pair, 5, true)};
  EXPECT_TRUE(find_stalls(ranks, 2).empty());
  const std::string report = hang_report(FlightDir{"d", 2, ranks, {}}, {1}, flight_now_seconds());
  EXPECT_TRUE(has(report, "no operation that some ranks wait in and others have not reached")) << report;
  EXPECT_TRUE(has(report, "rank 1 (host ")) << report;  // the suspect is still described
  EXPECT_TRUE(has(report, "rank 0 waits in all_reduce #5 on mpi group 'world' [ranks 0, 1] (for ")) << report;
  EXPECT_TRUE(has(report, "all_reduce #5 on 'world' 4.0 KiB: OPEN, blocked in it for ")) << report;
}

TEST(FlightReport, PointToPointNamesTheMissingPartner) {
  const std::vector<int64_t> pair{0, 1};
  // Rank 0 blocks in its third receive from rank 1, which has sent two.
  std::vector<RankFlight> ranks{rank_file(0, 2, "pp", pair, 3, true, "recv", 1),
                                rank_file(1, 2, "pp", pair, 2, false, "send", 0)};
  auto stalls = find_stalls(ranks, 2);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].op, "recv");
  EXPECT_EQ(stalls[0].seq, 3u);
  EXPECT_EQ(stalls[0].peer, 1);
  ASSERT_EQ(stalls[0].behind.size(), 1u);
  EXPECT_EQ(stalls[0].behind[0].rank, 1);
  const std::string report = hang_report(FlightDir{"d", 2, ranks, {}}, {}, flight_now_seconds());
  EXPECT_TRUE(has(report, "recv #3 on mpi group 'pp' [ranks 0, 1]: rank 0 waits in it (for ")) << report;
  EXPECT_TRUE(has(report, " for rank 1; not arrived: rank 1 (had sent 2 of the 3 messages rank 0 waits for on this "
                          "group when it last wrote its file)"))
      << report;
  // Rank 1 sent the third (still open on its side): in flight, not stalled.
  ranks[1] = rank_file(1, 2, "pp", pair, 3, true, "send", 0);
  EXPECT_TRUE(find_stalls(ranks, 2).empty());
  // A partner with no file is named as such.
  EXPECT_EQ(find_stalls({ranks[0]}, 2).at(0).no_file, std::vector<int>{1});
}

TEST(FlightReport, DirectoryFilesAreWrittenAndReadBack) {
  const std::string dir = stratum::fs::make_temp_directory("stratum_flight_");
  {
    FlightRecorder r0(0, 2), r1(1, 2);
    r0.set_file(flight_file(dir, 0));
    r1.set_file(flight_file(dir, 1));
    const int g0 = r0.add_group("world", "mpi", {0, 1}), g1 = r1.add_group("world", "mpi", {0, 1});
    r0.begin(g0, 1, "barrier", 0);
    r1.flush_every(std::chrono::milliseconds(20));  // the background thread writes it
    r1.end(r1.begin(g1, 1, "barrier", 0));
    r1.begin(g1, 2, "barrier", 0);
    r0.begin(g0, 2, "barrier", 0);
    r0.begin(g0, 3, "barrier", 0);
    EXPECT_TRUE(r0.write_file("timeout"));
    auto text_of = [](const std::string& path) {
      std::ifstream in(path);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    for (int i = 0; i < 300 && !has(text_of(flight_file(dir, 1)), " issued 2 "); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ofstream(dir + "/rank7.txt.tmp123") << "half written";
    std::ofstream(dir + "/rank5.txt") << "garbage";
    const FlightDir read = read_flight_dir(dir);
    ASSERT_EQ(read.ranks.size(), 2u);
    EXPECT_EQ(read.ranks[0].reason, "timeout");
    ASSERT_EQ(read.problems.size(), 1u);
    EXPECT_TRUE(has(read.problems[0], dir + "/rank5.txt")) << read.problems[0];
    const auto stalls = find_stalls(read.ranks, 2);
    ASSERT_EQ(stalls.size(), 1u);
    EXPECT_EQ(stalls[0].seq, 3u);  // rank 0's first open barrier everyone has not reached
    EXPECT_EQ(stalls[0].behind[0].rank, 1);
  }
  // Each recorder wrote its file once more on the way out.
  EXPECT_EQ(read_flight_dir(dir).ranks.at(1).reason, "exit");
  stratum::fs::remove_tree(dir);
}

}  // namespace
