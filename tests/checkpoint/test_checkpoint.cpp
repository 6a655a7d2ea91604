// Checkpoints: exact resume, loading at another data-parallel size and ZeRO
// stage, atomic saves that survive a killed saver, and clear errors for corrupt
// or mismatched checkpoints. Runs under mpirun (CTest: 1, 2 and 4 ranks).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "../distributed/distributed_test_context.h"
#include "ckpt_trainer.h"
#include "../engine/shared_temp_dir.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/manifest.h"
#include "stratum/core/fs.h"
#include "stratum/engine/engine.h"
#include "stratum/io/safetensors.h"

using namespace stratum;
using stratum::test::Mlp;
using stratum::test::Trainer;

namespace {

std::shared_ptr<distributed::Communicator> groups_of(int k) {
  auto world = test::context().cpu_world;
  std::vector<std::vector<int64_t>> groups(world->size() / k);
  for (int r = 0; r < world->size(); ++r) groups[r / k].push_back(r);
  return world->split(groups, "dp" + std::to_string(k));
}

// One directory for the whole job (rank 0 makes it; the others learn its name).

void cleanup(const std::string& dir) {
  test::context().cpu_world->barrier()->wait();
  if (test::context().cpu_world->rank() == 0) fs::remove_tree(dir);
}

}  // namespace

TEST(Checkpoint, ResumeIsExact) {
  auto world = test::context().cpu_world;
  for (int stage : {0, 1, 2}) {
    const std::string dir = test::shared_temp_dir("stratum_ckpt_resume_");
    Trainer straight(stage, world);
    std::vector<double> want;
    for (int s = 0; s < 8; ++s) want.push_back(straight.train_step(s));

    {
      Trainer first(stage, world);
      for (int s = 0; s < 4; ++s) EXPECT_DOUBLE_EQ(first.train_step(s), want[s]);
      save_checkpoint(first.engine->core(), dir, "global_step4", {{"next_step", 4}});
    }
    Trainer resumed(stage, world, /*init_seed=*/7);  // different initial weights: the checkpoint must overwrite them
    nlohmann::json client = load_checkpoint(resumed.engine->core(), dir);
    ASSERT_EQ(client.at("next_step"), 4);
    EXPECT_EQ(resumed.engine->global_steps(), 4);
    for (int s = 4; s < 8; ++s) EXPECT_DOUBLE_EQ(resumed.train_step(s), want[s]) << "stage " << stage << " step " << s;
    EXPECT_TRUE(torch::equal(resumed.weights(), straight.weights())) << "stage " << stage;
    cleanup(dir);
  }
}

TEST(Checkpoint, LoadsAtAnotherDataParallelSizeAndStage) {
  auto world = test::context().cpu_world;
  const int n = world->size();
  if (n < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const std::string dir = test::shared_temp_dir("stratum_ckpt_reshard_");
  // Saved by all ranks at ZeRO-2 ...
  Trainer saver(2, world);
  for (int s = 0; s < 4; ++s) saver.train_step(s);
  save_checkpoint(saver.engine->core(), dir, "global_step4", {});
  std::vector<double> want;
  for (int s = 4; s < 7; ++s) want.push_back(saver.train_step(s));
  // ... loaded by groups of n/2 ranks at ZeRO-1 and by every rank alone at ZeRO-0.
  for (auto [dp, stage] : {std::pair{n / 2, 1}, std::pair{1, 0}, std::pair{n, 1}}) {
    Trainer loader(stage, groups_of(dp), 9);
    load_checkpoint(loader.engine->core(), dir);
    for (int s = 4; s < 7; ++s)
      EXPECT_NEAR(loader.train_step(s), want[s - 4], 1e-5 * std::abs(want[s - 4]))
          << "dp " << dp << " stage " << stage << " step " << s;
  }
  cleanup(dir);
}

TEST(Checkpoint, ConsolidatedWeightsEqualTheModel) {
  auto world = test::context().cpu_world;
  const std::string dir = test::shared_temp_dir("stratum_ckpt_consolidated_");
  Trainer t(2, world);
  for (int s = 0; s < 3; ++s) t.train_step(s);
  save_checkpoint(t.engine->core(), dir, "global_step3", {});
  auto full = read_consolidated_checkpoint(dir + "/global_step3", /*with_optimizer_states=*/true);
  for (const auto& item : t.model->named_parameters())
    EXPECT_TRUE(torch::equal(full.tensors.at(item.key()), item.value().detach())) << item.key();
  EXPECT_EQ(full.tensors.count("exp_avg|fc1.weight"), 1u);
  EXPECT_EQ(full.manifest->data_parallel_size, world->size());
  // The manifest lists each shard's fragments: exactly the master tensors the shard holds.
  int64_t listed = 0;
  for (const auto& shard : full.manifest->shards) {
    int masters = 0;
    for (const auto& e : io::read_safetensors_header(dir + "/global_step3/" + shard.file).tensors)
      masters += e.name.rfind("master|", 0) == 0;
    EXPECT_EQ(static_cast<int>(shard.fragments.size()), masters) << shard.file;
    for (const auto& f : shard.fragments) listed += f.numel;
    EXPECT_EQ(shard.checksums.size(), 3 * shard.fragments.size() + 1) << "a checksum per tensor: " << shard.file;
  }
  int64_t numel = 0;
  for (const auto& p : t.model->parameters()) numel += p.numel();
  EXPECT_EQ(listed, numel) << "every element of every parameter is in exactly one shard";
  cleanup(dir);
}

TEST(Checkpoint, MismatchedModelIsAClearErrorOnEveryRank) {
  auto world = test::context().cpu_world;
  const std::string dir = test::shared_temp_dir("stratum_ckpt_mismatch_");
  Trainer t(1, world);
  t.train_step(0);
  save_checkpoint(t.engine->core(), dir, "global_step1", {});
  struct Wider : torch::nn::Module {
    Wider() {
      fc1 = register_module("fc1", torch::nn::Linear(16, 48));
      fc2 = register_module("fc2", torch::nn::Linear(48, 32));
      fc3 = register_module("fc3", torch::nn::Linear(32, 4));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  };
  auto engine = initialize(t.config, std::make_shared<Wider>(), world, torch::kCPU);
  try {
    load_checkpoint(engine.core(), dir);
    ADD_FAILURE() << "loaded a checkpoint of another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'fc1.weight': checkpoint shape [32, 16], model shape [48, 16]"),
              std::string::npos) << e.what();
  }
  world->barrier()->wait();
  cleanup(dir);
}

TEST(Checkpoint, TruncatedShardIsAClearError) {
  auto world = test::context().cpu_world;
  const std::string dir = test::shared_temp_dir("stratum_ckpt_truncated_");
  Trainer t(2, world);
  t.train_step(0);
  save_checkpoint(t.engine->core(), dir, "global_step1", {});
  world->barrier()->wait();
  const std::string shard = dir + "/global_step1/rank_00000.safetensors";
  if (world->rank() == 0) ::truncate(shard.c_str(), 200);
  world->barrier()->wait();
  Trainer loader(2, world);
  try {
    load_checkpoint(loader.engine->core(), dir);
    ADD_FAILURE() << "loaded a truncated checkpoint";
  } catch (const Error& e) {
    // Rank 0 reads that shard and names it; the others learn that rank 0 failed.
    EXPECT_NE(std::string(e.what()).find(world->rank() == 0 ? "rank_00000.safetensors" : "failed on rank 0"),
              std::string::npos) << e.what();
  }
  cleanup(dir);
}

// A saver killed between writing its shards and publishing the checkpoint
// leaves the previous checkpoint and `latest` intact and loadable.
TEST(Checkpoint, KilledSaverLeavesThePreviousCheckpoint) {
  auto world = test::context().cpu_world;
  if (world->size() != 1) GTEST_SKIP() << "runs the saver as a child process of a single rank";
  const std::string dir = fs::make_temp_directory("stratum_ckpt_kill_");
  {
    Trainer t(2, world);
    t.train_step(0);
    save_checkpoint(t.engine->core(), dir, "global_step1", {{"marker", "first"}});
  }
  // The saver is another process (an MPI job of one rank), killed while it
  // stalls between writing its shard and publishing the checkpoint.
  pid_t child = ::fork();
  if (child == 0) {
    ::setsid();  // its own process group: mpirun and the saver die together
    // A fresh job, not a part of ours: drop the variables our mpirun gave us.
    std::vector<std::string> inherited;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      for (const char* prefix : {"OMPI_COMM_WORLD", "OMPI_MCA_orte", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_FILE",
                                 "OMPI_NUM", "OMPI_APP", "OMPI_UNIVERSE", "OMPI_FIRST", "OMPI_ARGV", "OMPI_COMMAND",
                                 "PMIX_", "OPAL_", "ORTE_"})
        if (kv.rfind(prefix, 0) == 0) inherited.push_back(kv.substr(0, kv.find('=')));
    }
    for (const auto& name : inherited) ::unsetenv(name.c_str());
    const std::string cmd = std::string("exec ") + STRATUM_MPIEXEC + " -np 1 " + STRATUM_BIN_DIR + "/ckpt_kill_probe " + dir;
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  const std::string stalled = dir + "/global_step2.tmp/stalled.0";
  for (int i = 0; i < 300 && !fs::exists(stalled); ++i) ::usleep(100000);
  ASSERT_TRUE(fs::exists(stalled)) << "the child never reached the save";
  ::kill(-child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(latest_checkpoint_tag(dir).value_or(""), "global_step1");
  EXPECT_FALSE(fs::exists(dir + "/global_step2/manifest.json"));
  Trainer loader(2, world);
  EXPECT_EQ(load_checkpoint(loader.engine->core(), dir).at("marker"), "first");
  // The next save of that tag clears the debris and succeeds.
  save_checkpoint(loader.engine->core(), dir, "global_step2", {{"marker", "third"}});
  EXPECT_EQ(latest_checkpoint_tag(dir).value_or(""), "global_step2");
  EXPECT_FALSE(fs::exists(dir + "/global_step2.tmp"));
  fs::remove_tree(dir);
}

TEST(Checkpoint, MissingCheckpointIsAClearError) {
  auto world = test::context().cpu_world;
  Trainer t(0, world);
  try {
    load_checkpoint(t.engine->core(), "/nonexistent/ckpts");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ckpts: no checkpoint to resume from"), std::string::npos)
        << e.what();
  }
}

namespace {

// Every file of a checkpoint tag, by name -> its bytes.
std::map<std::string, std::string> tag_files(const std::string& tag_dir) {
  std::map<std::string, std::string> out;
  for (const std::string& name : fs::list_directory(tag_dir))
    out[name] = fs::read_regular_file(tag_dir + "/" + name, size_t{1} << 30, "checkpoint file");
  return out;
}

}  // namespace

// An asynchronous save writes what a synchronous one writes, byte for byte,
// though training moves on while it writes (and its host buffers are reused
// by the next save; at ZeRO-2 carved from the block reserved at start);
// resuming from it continues exactly.
TEST(Checkpoint, AsyncSaveEqualsASynchronousOneAndResumesExactly) {
  auto world = test::context().cpu_world;
  for (int stage : {0, 2}) {
    const std::string sync_dir = test::shared_temp_dir("stratum_ckpt_sync_");
    const std::string async_dir = test::shared_temp_dir("stratum_ckpt_async_");
    std::vector<CheckpointSaveReport> reports;
    std::vector<double> want;
    {
      Trainer t(stage, world);
      CheckpointSaver saver(/*async=*/true, [&](const CheckpointSaveReport& r) { reports.push_back(r); });
      if (stage == 2) saver.reserve_staging(t.engine->core());  // the copies from the block reserved at start
      for (int s = 0; s < 6; ++s) {
        want.push_back(t.train_step(s));
        if (s == 1 || s == 3) {
          const std::string tag = "global_step" + std::to_string(s + 1);
          save_checkpoint(t.engine->core(), sync_dir, tag, {{"next_step", s + 1}});
          saver.save(t.engine->core(), async_dir, tag, {{"next_step", s + 1}});
          EXPECT_TRUE(saver.pending());
          EXPECT_GT(saver.staging_bytes(), 0u);
        }
      }
      saver.finish();
      EXPECT_FALSE(saver.pending());
    }
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_EQ(reports[0].tag, "global_step2");
    EXPECT_TRUE(reports[1].async);
    EXPECT_GT(reports[1].bytes, 0u);
    EXPECT_GE(reports[1].write_seconds, 0.0);
    EXPECT_EQ(latest_checkpoint_tag(async_dir).value_or(""), "global_step4");
    for (const char* tag : {"global_step2", "global_step4"}) {
      const auto sync_files = tag_files(sync_dir + "/" + tag), async_files = tag_files(async_dir + "/" + tag);
      ASSERT_EQ(sync_files.size(), async_files.size()) << tag;
      for (const auto& [name, bytes] : sync_files) {
        ASSERT_TRUE(async_files.count(name)) << tag << "/" << name;
        EXPECT_TRUE(async_files.at(name) == bytes) << tag << "/" << name << " differs (stage " << stage << ")";
      }
    }
    Trainer resumed(stage, world, /*init_seed=*/7);
    EXPECT_EQ(load_checkpoint(resumed.engine->core(), async_dir, "global_step2").at("next_step"), 2);
    for (int s = 2; s < 6; ++s) EXPECT_DOUBLE_EQ(resumed.train_step(s), want[s]) << "stage " << stage << " step " << s;
    cleanup(sync_dir);
    cleanup(async_dir);
  }
}

// A save failing on one rank at any stage (the copy into host memory, the
// background write, the publication) ends every rank with an error naming it
// and leaves the previous checkpoint published and loadable.
TEST(Checkpoint, AsyncSaveFailingAtAnyStageLeavesThePreviousCheckpoint) {
  auto world = test::context().cpu_world;
  const int failing = world->size() - 1;
  for (const std::string stage : {"copy", "write", "publish"}) {
    const std::string dir = test::shared_temp_dir("stratum_ckpt_async_fail_");
    {
      Trainer t(2, world);
      CheckpointSaver saver(/*async=*/true);
      t.train_step(0);
      saver.save(t.engine->core(), dir, "global_step1", {{"marker", "first"}});
      t.train_step(1);
      CheckpointSaveOptions fail;
      fail.at_stage = [&](const std::string& at, const std::string&) {
        if (at == stage && world->rank() == failing) throw Error("disk full at " + at);
      };
      std::string message;
      try {
        saver.save(t.engine->core(), dir, "global_step2", {{"marker", "second"}}, fail);
        t.train_step(2);  // training goes on while the write fails in the background
        saver.finish();
      } catch (const std::exception& e) {
        message = e.what();
      }
      const std::string said = world->rank() == failing ? "disk full at " + stage : "saving checkpoint global_step2 failed";
      EXPECT_NE(message.find(said), std::string::npos) << stage << ": " << message;
      EXPECT_FALSE(saver.pending());
    }
    EXPECT_EQ(latest_checkpoint_tag(dir).value_or(""), "global_step1") << stage;
    EXPECT_FALSE(fs::exists(dir + "/global_step2/manifest.json")) << stage;
    Trainer loader(2, world);
    EXPECT_EQ(load_checkpoint(loader.engine->core(), dir).at("marker"), "first") << stage;
    cleanup(dir);
  }
}

// poll() after each step publishes a background save as soon as every rank
// has written it: `latest` moves without waiting for the next save.
TEST(Checkpoint, AsyncSaveIsPublishedAtThePollAfterEveryRankWroteIt) {
  auto world = test::context().cpu_world;
  const std::string dir = test::shared_temp_dir("stratum_ckpt_async_poll_");
  Trainer t(2, world);
  int published = 0;
  CheckpointSaver saver(/*async=*/true, [&](const CheckpointSaveReport&) { ++published; });
  saver.poll();  // nothing pending: nothing to do
  t.train_step(0);
  saver.save(t.engine->core(), dir, "global_step1", {{"marker", "first"}});
  int step = 1;
  for (; saver.pending() && step < 2000; ++step) {
    t.train_step(step % 8);
    saver.poll();
  }
  EXPECT_FALSE(saver.pending()) << "never published after " << step << " steps";
  EXPECT_EQ(published, 1);
  EXPECT_EQ(latest_checkpoint_tag(dir).value_or(""), "global_step1");
  saver.finish();  // nothing left
  EXPECT_EQ(published, 1);
  cleanup(dir);
}
