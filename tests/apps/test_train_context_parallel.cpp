// stratum-train with each sequence split over 2 context-parallel ranks (ring
// and Ulysses): trains, evaluates, samples and checkpoints, matches the
// one-rank run step for step (the data-parallel size counts data replicas,
// so the batch and the data are the one rank's), and its checkpoint resumes
// in one process; a model whose heads Ulysses cannot split is refused before
// training, naming the key and the numbers.
#include <gtest/gtest.h>

#include <filesystem>

#include "train_cli.h"

using namespace stratum::test::train_cli;

namespace {

std::string train_args(const std::string& dir, const std::string& config, int steps, const std::string& log,
                       const std::string& model = "--model tiny-llama --set layers=2 --set max_seq_len=32") {
  return kBin + "/stratum-train --config " + config + " " + model + " --data default --cache-dir " + dir +
         "/cache --steps " + std::to_string(steps) +
         " --eval-every 2 --eval-batches 1 --sample-tokens 8 --print-every 1 --log-dir " + dir + "/" + log;
}

std::string cp_config(int cp, const std::string& method) {
  return R"({"train_batch_size": 4, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "context_parallel": {"size": )" + std::to_string(cp) + R"(, "method": ")" + method + R"("}})";
}

}  // namespace

TEST_F(TrainCli, ContextParallelMatchesOneRankAndResumesInOneProcess) {
  const std::string one = write_file(dir_, "one.json", cp_config(1, "ring"));
  Result r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, one, 4, "one_log"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto one_losses = losses(dir_ + "/one_log/metrics.csv");
  ASSERT_EQ(one_losses.size(), 4u);
  for (const std::string method : {"ring", "ulysses"}) {
    const std::string cp2 = write_file(dir_, method + ".json", cp_config(2, method));
    r = run(kBin + "/stratum-run --num_procs 2 " + train_args(dir_, cp2, 4, method + "_log") + " --save-dir " + dir_ +
            "/" + method + "_ckpt --save-every 2");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("x 1 data-parallel | each sequence over 2 context-parallel ranks (" + method + ")"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("step 4/4 | loss"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--- sample (8 tokens"), std::string::npos) << r.output;
    const auto cp_losses = losses(dir_ + "/" + method + "_log/metrics.csv");
    ASSERT_EQ(cp_losses.size(), 4u);
    for (const auto& [step, loss] : one_losses)
      EXPECT_NEAR(cp_losses.at(step), loss, 1e-5 * loss) << method << " step " << step;
  }
  r = run(kBin + "/stratum-run --num_procs 1 " + train_args(dir_, one, 4, "resumed_log") + " --save-dir " + dir_ +
          "/ring_ckpt --resume-tag global_step2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed at step 2"), std::string::npos) << r.output;
}

// Windows that keep their documents apart (--documents separate: each
// sequence's segments and restarting positions cut with it): the same losses
// over 2 context-parallel ranks as on one.
TEST_F(TrainCli, ContextParallelWithSeparateDocumentsMatchesOneRank) {
  const std::string docs = dir_ + "/docs";
  std::filesystem::create_directories(docs);
  // Short documents (one to three lines, 30 to 90 bytes), so that every 32-token window spans several.
  for (int d = 0; d < 60; ++d) {
    std::string text;
    for (int line = 0; line < 1 + d % 3; ++line)
      text += "doc " + std::to_string(d) + " line " + std::to_string(line) + ": a quick fox.\n";
    write_file(docs, "doc" + std::to_string(d) + ".txt", text);
  }
  // The directory's text files are the documents.
  const auto on_docs = [&](std::string args) {
    return args.replace(args.find("--data default"), 14, "--data " + docs) + " --documents separate";
  };
  const std::string one = write_file(dir_, "one.json", cp_config(1, "ring"));
  Result r = run(kBin + "/stratum-run --num_procs 1 " + on_docs(train_args(dir_, one, 3, "one_log")));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string cp2 = write_file(dir_, "cp2.json", cp_config(2, "ring"));
  r = run(kBin + "/stratum-run --num_procs 2 " + on_docs(train_args(dir_, cp2, 3, "cp_log")));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto a = losses(dir_ + "/one_log/metrics.csv"), b = losses(dir_ + "/cp_log/metrics.csv");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (const auto& [step, loss] : a) EXPECT_NEAR(b.at(step), loss, 1e-5 * loss) << "step " << step;
}

TEST_F(TrainCli, ContextParallelHeadsUlyssesCannotSplitAreRefused) {
  const std::string config = write_file(dir_, "cp.json", cp_config(2, "ulysses"));
  Result r = run(kBin + "/stratum-run --num_procs 2 " +
                 train_args(dir_, config, 2, "log", "--model tiny-llama --set max_seq_len=32 --set kv_heads=1"));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("context_parallel.size: Ulysses over 2 ranks splits the heads, but the model has 4 query "
                          "and 1 key/value heads"),
            std::string::npos)
      << r.output;
}
