// `latest` and --resume: `latest` names a tag inside its own directory and
// nothing else (no "..", no '/', no link, no FIFO, no huge file); --resume
// never starts fresh over a directory that holds checkpoints.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "../common/error_of.h"
#include "stratum/checkpoint/tags.h"
#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace {

using namespace stratum;

using stratum::test::error_of;

class CheckpointTags : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::make_temp_directory("stratum_tags_"); }
  void TearDown() override { fs::remove_tree(dir_); }
  void make_tag(const std::string& tag) {
    fs::make_directories(dir_ + "/" + tag);
    std::ofstream(dir_ + "/" + tag + "/manifest.json") << "{}";
  }
  void write_latest(const std::string& text) { std::ofstream(dir_ + "/latest") << text; }
  std::string dir_;
};

TEST_F(CheckpointTags, LatestNamesATagInsideItsDirectory) {
  EXPECT_FALSE(latest_checkpoint_tag(dir_));
  write_latest("global_step10\n");
  EXPECT_EQ(latest_checkpoint_tag(dir_).value_or(""), "global_step10");
  for (const char* bad : {"../other/global_step10", "/etc", "..", "a/b"}) {
    write_latest(bad);
    const std::string e = error_of([&] { latest_checkpoint_tag(dir_); });
    EXPECT_NE(e.find(dir_ + "/latest: does not hold a tag name"), std::string::npos) << bad << ": " << e;
  }
  write_latest("\n");
  EXPECT_NE(error_of([&] { latest_checkpoint_tag(dir_); }).find("latest: empty"), std::string::npos);
}

TEST_F(CheckpointTags, LatestThatIsALinkFifoOrHugeIsRefusedWithoutEchoingIt) {
  std::ofstream(dir_ + "/secret") << "password123\n";
  ASSERT_EQ(::symlink((dir_ + "/secret").c_str(), (dir_ + "/latest").c_str()), 0);
  std::string e = error_of([&] { latest_checkpoint_tag(dir_); });
  EXPECT_NE(e.find("a symbolic link"), std::string::npos) << e;
  EXPECT_EQ(e.find("password123"), std::string::npos) << e;
  ::unlink((dir_ + "/latest").c_str());
  ASSERT_EQ(::mkfifo((dir_ + "/latest").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { latest_checkpoint_tag(dir_); }).find("a FIFO"), std::string::npos);
  ::unlink((dir_ + "/latest").c_str());
  write_latest(std::string(5000, 'a'));
  EXPECT_NE(error_of([&] { latest_checkpoint_tag(dir_); }).find("over the limit of 4096 bytes"), std::string::npos);
}

TEST_F(CheckpointTags, ResumeStartsFreshOnlyInAnAbsentOrEmptyDirectory) {
  EXPECT_EQ(resolve_resume(dir_ + "/new").kind, ResumePoint::Kind::fresh);
  EXPECT_EQ(resolve_resume(dir_).kind, ResumePoint::Kind::fresh);
  fs::make_directories(dir_ + "/global_step5.tmp");  // an interrupted first save
  EXPECT_EQ(resolve_resume(dir_).kind, ResumePoint::Kind::fresh);
  make_tag("global_step9");
  make_tag("global_step10");
  write_latest("global_step10\n");
  const ResumePoint p = resolve_resume(dir_);
  EXPECT_EQ(p.kind, ResumePoint::Kind::resume);
  EXPECT_EQ(p.tag, "global_step10");
}

TEST_F(CheckpointTags, ResumeWithoutAUsableLatestNamesTheCheckpointsAndTheTagToPass) {
  make_tag("global_step9");
  make_tag("global_step10");
  std::string e = error_of([&] { resolve_resume(dir_); });
  EXPECT_NE(e.find(dir_ + ": no 'latest' file, but the directory holds checkpoints global_step9, global_step10; "
                          "pass --resume-tag global_step10"), std::string::npos) << e;
  write_latest("");
  EXPECT_NE(error_of([&] { resolve_resume(dir_); }).find("latest: empty"), std::string::npos);
  write_latest("global_step11");
  EXPECT_NE(error_of([&] { resolve_resume(dir_); }).find("names 'global_step11', which is not a checkpoint there"),
            std::string::npos);
  EXPECT_EQ(resolve_resume(dir_, "global_step9").tag, "global_step9");
  EXPECT_NE(error_of([&] { resolve_resume(dir_, "global_step8"); }).find("no such checkpoint"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_resume(dir_, "../x"); }).find("without '/'"), std::string::npos);
}

TEST_F(CheckpointTags, ResumeRefusesADirectoryOfOtherFiles) {
  std::ofstream(dir_ + "/notes.txt") << "mine";
  const std::string e = error_of([&] { resolve_resume(dir_); });
  EXPECT_NE(e.find("the directory is not empty (it holds notes.txt); refusing to start fresh over it"),
            std::string::npos) << e;
}

}  // namespace
