// The progress line (terminal and plain) and the metrics files.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/monitor/metrics_log.h"
#include "stratum/monitor/progress.h"

using namespace stratum::monitor;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
StepMetrics metrics(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.total_steps = 100;
  m.loss = 2.5;
  m.lr = 3e-4;
  m.loss_scale = 65536;
  m.tokens_per_second = 12345;
  m.mfu = 0.42;
  m.memory_gib = 1.5;
  return m;
}
}  // namespace

TEST(Progress, LineCarriesEveryFigure) {
  const std::string line = ProgressReporter::format_line(metrics(7), 125);
  for (const char* part : {"step 7/100", "loss 2.5000", "lr 3.000e-04", "scale 65536", "tok/s 12.34k", "MFU 42.0%",
                           "mem 1.50 GiB", "ETA 02:05"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
  StepMetrics several = metrics(7);
  several.memory_rank = 3;  // the largest of several ranks' memory
  EXPECT_NE(ProgressReporter::format_line(several, 125).find("mem 1.50 GiB (rank 3) |"), std::string::npos);
  EXPECT_EQ(ProgressReporter::format_eta(3725), "1:02:05");
  EXPECT_EQ(ProgressReporter::format_eta(-1), "--:--");
}

TEST(Progress, PlainOutputPrintsEveryNthStep) {
  const std::string dir = stratum::fs::make_temp_directory("stratum_progress_");
  const std::string path = dir + "/out.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  {
    ProgressReporter p(10, f, /*terminal=*/false);
    for (int s = 1; s <= 25; ++s) p.update(metrics(s));
    p.note("eval loss 2.1");
    p.finish();
  }
  std::fclose(f);
  const std::string text = read_all(path);
  EXPECT_NE(text.find("step 1/100"), std::string::npos);
  EXPECT_NE(text.find("step 10/100"), std::string::npos);
  EXPECT_NE(text.find("step 20/100"), std::string::npos);
  EXPECT_EQ(text.find("step 5/100"), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no redraws outside a terminal";
  EXPECT_NE(text.find("eval loss 2.1\n"), std::string::npos);
  stratum::fs::remove_tree(dir);
}

TEST(Progress, TerminalOutputRedrawsOneLine) {
  const std::string dir = stratum::fs::make_temp_directory("stratum_progress_");
  const std::string path = dir + "/tty.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  {
    ProgressReporter p(10, f, /*terminal=*/true);
    p.update(metrics(1));
    p.update(metrics(2));
    p.note("saved checkpoint");
    p.finish();
  }
  std::fclose(f);
  const std::string text = read_all(path);
  EXPECT_NE(text.find("\r\033[K["), std::string::npos);
  EXPECT_NE(text.find("saved checkpoint\n"), std::string::npos);
  stratum::fs::remove_tree(dir);
}

TEST(MetricsLog, CsvAndJsonlRowsAndResume) {
  const std::string dir = stratum::fs::make_temp_directory("stratum_metrics_") + "/run";
  {
    MetricsLog log(dir, {"step", "loss", "lr"});
    log.write({{"step", 1}, {"loss", 2.5}, {"lr", 1e-3}});
    log.write({{"step", 2}, {"loss", 2.25}});
    EXPECT_THROW(log.write({{"bogus", 1}}), stratum::Error);
  }
  {
    MetricsLog again(dir, {"step", "loss", "lr"});  // resume appends, no second header
    again.write({{"step", 3}, {"loss", 2.0}, {"lr", 1e-3}});
  }
  EXPECT_EQ(read_all(dir + "/metrics.csv"), "step,loss,lr\n1,2.5,0.001\n2,2.25,\n3,2,0.001\n");
  EXPECT_EQ(read_all(dir + "/metrics.jsonl"),
            "{\"step\": 1, \"loss\": 2.5, \"lr\": 0.001}\n{\"step\": 2, \"loss\": 2.25}\n"
            "{\"step\": 3, \"loss\": 2, \"lr\": 0.001}\n");
  stratum::fs::remove_tree(dir);
}
